// The GPU path of ckpt: page-locked (pinned) snapshot memory for async saves
// of a GPU-resident state, and an NCCL data plane for shared load reads.
//
// Compiled where the CUDA toolkit (runtime API) and NCCL are found at
// configure time (CKPT_HAVE_CUDA); otherwise every factory here returns
// Unimplemented saying so, and GpuInfo() reports compiled = false. Nothing
// here needs nvcc: only the CUDA runtime and NCCL host APIs are used.
//
// Device choice: a process uses device (local rank % device count), the local
// rank taken from OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or LOCAL_RANK
// (0 when none is set), as Megatron sets torch.cuda.set_device(local_rank).
// Errors name the rank, the CUDA/NCCL call and its error string; "no CUDA
// device" is FailedPrecondition. Thread-safety: the factories may be called
// from any thread; what they return follows its own interface's contract.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "ckpt/base/comm.h"
#include "ckpt/mpi/comm_mpi.h"
#include "ckpt/protocol/snapshot_memory.h"

namespace ckpt::gpu {

struct GpuInfo {
  bool compiled = false;       // built with CUDA + NCCL
  int cuda_runtime = 0;        // cudaRuntimeGetVersion, e.g. 13000 (0: not compiled)
  int cuda_driver = 0;         // cudaDriverGetVersion (0: no driver)
  int nccl = 0;                // ncclGetVersion, e.g. 22805
  int device_count = 0;        // 0 on a machine without a GPU
  std::string device_error;    // why device_count is 0, if an error said so
  std::vector<std::string> devices;  // names
  int local_device = -1;       // the device this process would use
};
GpuInfo QueryGpu();

// Pinned host memory (cudaHostAlloc) on this process's device; CopyAll copies
// device-memory sources with cudaMemcpyAsync on a private stream and host
// sources with memcpy. FailedPrecondition without a device.
Result<std::unique_ptr<SnapshotMemory>> MakePinnedSnapshotMemory();

// A Comm whose AllToAll (the data plane of shared load reads) moves the bytes
// with NCCL point-to-point (ncclSend/ncclRecv in one group, staged through
// device buffers), while Gather/Broadcast and the size exchange stay on
// `control` (MPI, with deadlines). Collective over `control`: every rank
// checks its device and reports; any failure fails every rank at once,
// naming the rank. The NCCL communicator is non-blocking so every wait has
// `timeout`; a deadline passed or an NCCL async error aborts it (later calls
// fail). NCCL allows one rank per device: ranks sharing a device fail at init.
Result<std::unique_ptr<Comm>> MakeNcclComm(std::unique_ptr<MpiComm> control, Millis timeout);

}  // namespace ckpt::gpu
