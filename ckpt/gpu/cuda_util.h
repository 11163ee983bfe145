// Internal to the GPU path (CKPT_HAVE_CUDA builds): CUDA and NCCL results
// converted to Status once, here, and the choice of this process's device.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <string_view>

#include "ckpt/base/status.h"

namespace ckpt::gpu {

// "<what>: <cudaGetErrorName>: <cudaGetErrorString>" as Internal; OK for cudaSuccess.
Status CudaStatus(cudaError_t e, std::string_view what);
// "<what>: <ncclGetErrorString> (<ncclGetLastError>)" as Internal; OK for ncclSuccess.
Status NcclStatus(ncclResult_t r, std::string_view what, ncclComm_t comm = nullptr);

// The local rank from the launcher's environment (0 when unset).
int LocalRank();
// Picks and sets (cudaSetDevice) device LocalRank() % count. FailedPrecondition
// "no CUDA device ..." when there is none; `who` prefixes the message.
Result<int> SelectDevice(std::string_view who);

}  // namespace ckpt::gpu
