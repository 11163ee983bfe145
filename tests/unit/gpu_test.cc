// The GPU path (ckpt/gpu/gpu.h) as this build and machine allow: the build
// reports what it compiled; without a device every factory fails with a
// clear FailedPrecondition (CI, dev boxes); with a device, pinned snapshots
// of device-memory tensors round-trip through an async save bit for bit.
// The NCCL data plane's multi-rank checks are in tests/integration/gpu_paths.sh.
#include <gtest/gtest.h>

#include <cstring>

#include "ckpt/async_save.h"
#include "ckpt/gpu/gpu.h"
#include "support/state_util.h"
#include "support/test_util.h"

#ifdef CKPT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;

TEST(GpuTest, InfoMatchesTheBuild) {
  const gpu::GpuInfo g = gpu::QueryGpu();
#ifdef CKPT_HAVE_CUDA
  EXPECT_TRUE(g.compiled);
  EXPECT_GE(g.cuda_runtime, 12000);
  EXPECT_GE(g.nccl, 21800);  // NCCL 2.18+: non-blocking communicators
  EXPECT_EQ(int(g.devices.size()), g.device_count);
  EXPECT_TRUE(g.device_count > 0 || !g.device_error.empty()) << "no device and no reason given";
#else
  EXPECT_FALSE(g.compiled);
  auto m = gpu::MakePinnedSnapshotMemory();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kUnimplemented);
  EXPECT_NE(m.status().message().find("built without"), std::string::npos) << m.status().ToString();
#endif
}

TEST(GpuTest, WithoutADevicePinnedMemoryFailsNamingTheCause) {
  const gpu::GpuInfo g = gpu::QueryGpu();
  if (!g.compiled || g.device_count > 0) GTEST_SKIP() << "needs a CUDA build on a machine without a GPU";
  auto m = gpu::MakePinnedSnapshotMemory();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(m.status().message().find("no CUDA device"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("cudaGetDeviceCount"), std::string::npos) << m.status().ToString();
}

#ifdef CKPT_HAVE_CUDA
// A GPU-resident state: the snapshot is the D2H copy into pinned memory, so
// the checkpoint holds the values at Start although the device buffer is
// cleared right after.
TEST(GpuTest, PinnedSnapshotOfDeviceTensorsSavesTheValuesAtStart) {
  if (gpu::QueryGpu().device_count == 0) GTEST_SKIP() << "needs a GPU";
  auto mem = gpu::MakePinnedSnapshotMemory();
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_EQ((*mem)->name(), "pinned");
  OwnedState host;
  host.Add(Desc("w", DType::kBFloat16, {1024, 256}, {0, 0}, {1024, 256}), true);
  host.Add(Desc("b", DType::kFloat32, {1024}, {0}, {1024}), true);
  ShardedStateDict on_device;
  std::vector<void*> device_ptrs;
  for (const TensorEntry& t : host.dict().tensors()) {
    void* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, t.data.size()), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(d, t.data.data(), t.data.size(), cudaMemcpyHostToDevice), cudaSuccess);
    device_ptrs.push_back(d);
    on_device.AddTensor(t.meta, std::span<std::byte>(static_cast<std::byte*>(d), t.data.size()));
  }
  const std::string root = testing::ScratchDir("gpu_pinned");
  LocalComm comm;
  AsyncSaveOptions ao;
  ao.memory = mem->get();
  AsyncSaver saver(&comm, ao);
  SaveOptions so;
  so.root = root;
  so.iteration = 1;
  auto started = saver.Start(on_device, so);
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  for (size_t i = 0; i < device_ptrs.size(); ++i)  // "training" overwrites the device state
    ASSERT_EQ(cudaMemset(device_ptrs[i], 0xff, on_device.tensors()[i].data.size()), cudaSuccess);
  ASSERT_TRUE(saver.Wait().ok());
  for (void* d : device_ptrs) cudaFree(d);

  OwnedState back;
  back.Add(Desc("w", DType::kBFloat16, {1024, 256}, {0, 0}, {1024, 256}), false);
  back.Add(Desc("b", DType::kFloat32, {1024}, {0}, {1024}), false);
  LoadOptions lo;
  lo.root = root;
  ASSERT_TRUE(LoadCheckpoint(back.dict(), lo).ok());
  EXPECT_EQ(back.CountMismatches(), 0);
}

// Host tensors through pinned memory: memcpy path, same contract.
TEST(GpuTest, PinnedSnapshotOfHostTensorsIsolatesTheBuffers) {
  if (gpu::QueryGpu().device_count == 0) GTEST_SKIP() << "needs a GPU";
  auto mem = gpu::MakePinnedSnapshotMemory();
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  OwnedState s;
  s.Add(Desc("w", DType::kFloat32, {256, 64}, {0, 0}, {256, 64}), true);
  const std::string root = testing::ScratchDir("gpu_pinned_host");
  LocalComm comm;
  AsyncSaveOptions ao;
  ao.memory = mem->get();
  AsyncSaver saver(&comm, ao);
  SaveOptions so;
  so.root = root;
  so.iteration = 1;
  ASSERT_TRUE(saver.Start(s.dict(), so).ok());
  std::memset(s.dict().tensors()[0].data.data(), 0, s.dict().tensors()[0].data.size());
  ASSERT_TRUE(saver.Wait().ok());
  OwnedState back;
  back.Add(Desc("w", DType::kFloat32, {256, 64}, {0, 0}, {256, 64}), false);
  LoadOptions lo;
  lo.root = root;
  ASSERT_TRUE(LoadCheckpoint(back.dict(), lo).ok());
  EXPECT_EQ(back.CountMismatches(), 0);
}
#endif

}  // namespace
}  // namespace ckpt
