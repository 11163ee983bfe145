// Pinned snapshot memory (gpu.h): cudaHostAlloc'd buffers, device sources
// copied with cudaMemcpyAsync on a private stream, host sources with memcpy.
#include <cstring>

#include "ckpt/gpu/cuda_util.h"
#include "ckpt/gpu/gpu.h"

namespace ckpt::gpu {
namespace {

class PinnedSnapshotMemory final : public SnapshotMemory {
 public:
  explicit PinnedSnapshotMemory(cudaStream_t stream) : stream_(stream) {}
  ~PinnedSnapshotMemory() override { cudaStreamDestroy(stream_); }

  std::string_view name() const override { return "pinned"; }

  Result<std::byte*> Allocate(size_t bytes) override {
    void* p = nullptr;
    CKPT_RETURN_IF_ERROR(CudaStatus(cudaHostAlloc(&p, bytes == 0 ? 1 : bytes, cudaHostAllocDefault),
                                    "snapshot: cudaHostAlloc of " + std::to_string(bytes) + " pinned bytes"));
    return static_cast<std::byte*>(p);
  }

  void Free(std::byte* p, size_t) override {
    if (p) cudaFreeHost(p);
  }

  Status CopyAll(std::span<const SnapshotCopy> copies) override {
    bool queued = false;
    for (const SnapshotCopy& c : copies) {
      if (!IsDeviceMemory(c.src)) {
        std::memcpy(c.dst, c.src, c.bytes);
        continue;
      }
      CKPT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(c.dst, c.src, c.bytes, cudaMemcpyDeviceToHost, stream_),
                                      "snapshot: cudaMemcpyAsync D2H of " + std::to_string(c.bytes) + " bytes"));
      queued = true;
    }
    return queued ? CudaStatus(cudaStreamSynchronize(stream_), "snapshot: cudaStreamSynchronize") : Status::Ok();
  }

 private:
  static bool IsDeviceMemory(const void* p) {
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();  // an unregistered host pointer on old runtimes
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  }

  cudaStream_t stream_;
};

}  // namespace

Result<std::unique_ptr<SnapshotMemory>> MakePinnedSnapshotMemory() {
  CKPT_RETURN_IF_ERROR(SelectDevice("pinned snapshot memory").status());
  cudaStream_t stream = nullptr;
  CKPT_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                  "pinned snapshot memory: cudaStreamCreate"));
  return std::unique_ptr<SnapshotMemory>(new PinnedSnapshotMemory(stream));
}

GpuInfo QueryGpu() {
  GpuInfo info;
  info.compiled = true;
  cudaRuntimeGetVersion(&info.cuda_runtime);
  if (cudaDriverGetVersion(&info.cuda_driver) != cudaSuccess) info.cuda_driver = 0;
  ncclGetVersion(&info.nccl);
  const cudaError_t e = cudaGetDeviceCount(&info.device_count);
  if (e != cudaSuccess) {
    info.device_count = 0;
    info.device_error = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    (void)cudaGetLastError();
  }
  for (int d = 0; d < info.device_count; ++d) {
    cudaDeviceProp prop{};
    info.devices.push_back(cudaGetDeviceProperties(&prop, d) == cudaSuccess ? prop.name : "?");
  }
  if (info.device_count > 0) info.local_device = LocalRank() % info.device_count;
  return info;
}

}  // namespace ckpt::gpu
