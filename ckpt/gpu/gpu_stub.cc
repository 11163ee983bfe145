// The GPU path in a build without CUDA/NCCL (CKPT_HAVE_CUDA undefined): the
// factories say so; GpuInfo reports compiled = false.
#include "ckpt/gpu/gpu.h"

namespace ckpt::gpu {
namespace {
Status NotCompiled(const char* what) {
  return Status::Unimplemented(std::string(what) +
                               " needs the GPU path, but this ckpt was built without it (the CUDA toolkit or NCCL "
                               "was not found at configure time; CUDAToolkit_ROOT / NCCL_ROOT point CMake to them)");
}
}  // namespace

GpuInfo QueryGpu() { return GpuInfo{}; }

Result<std::unique_ptr<SnapshotMemory>> MakePinnedSnapshotMemory() { return NotCompiled("pinned snapshot memory"); }

Result<std::unique_ptr<Comm>> MakeNcclComm(std::unique_ptr<MpiComm>, Millis) {
  return NotCompiled("the NCCL data plane");
}

}  // namespace ckpt::gpu
