#include "ckpt/gpu/cuda_util.h"

#include <cstdlib>

namespace ckpt::gpu {

Status CudaStatus(cudaError_t e, std::string_view what) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Internal(std::string(what) + ": " + cudaGetErrorName(e) + ": " + cudaGetErrorString(e));
}

Status NcclStatus(ncclResult_t r, std::string_view what, ncclComm_t comm) {
  if (r == ncclSuccess) return Status::Ok();
  std::string msg = std::string(what) + ": " + ncclGetErrorString(r);
  const char* last = ncclGetLastError(comm);
  if (last && *last) msg += " (" + std::string(last) + ")";
  return Status::Internal(msg);
}

int LocalRank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char* v = std::getenv(var); v && *v) return std::atoi(v);
  return 0;
}

Result<int> SelectDevice(std::string_view who) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    (void)cudaGetLastError();  // clear the sticky error for later calls
    return Status::FailedPrecondition(std::string(who) + ": no CUDA device (cudaGetDeviceCount: " +
                                      (e == cudaSuccess ? std::string("0 devices") : cudaGetErrorString(e)) + ")");
  }
  const int device = LocalRank() % count;
  CKPT_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), std::string(who) + ": cudaSetDevice(" +
                                                              std::to_string(device) + ")"));
  return device;
}

}  // namespace ckpt::gpu
