// The GPU path (ckpt/gpu/gpu.h) as this build and machine allow: the build
// reports what it compiled; without a device every factory fails with a
// clear FailedPrecondition (CI, dev boxes); with a device, pinned snapshots
// of device-memory tensors round-trip through an async save bit for bit.
// The NCCL data plane's multi-rank checks are in tests/integration/gpu_paths.sh.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "ckpt/protocol/async_save.h"
#include "ckpt/gpu/gpu.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

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
// Saves `sd` through an AsyncSaver on `mem`, calling `overwrite` (the
// training step that changes the live buffers) between Start and Wait.
Status SaveAsync(SnapshotMemory* mem, const ShardedStateDict& sd, const std::string& root,
                 const std::function<void()>& overwrite) {
  LocalComm comm;
  AsyncSaveOptions ao;
  ao.memory = mem;
  AsyncSaver saver(&comm, ao);
  SaveOptions so;
  so.root = root;
  so.iteration = 1;
  CKPT_RETURN_IF_ERROR(saver.Start(sd, so).status());
  overwrite();
  return saver.Wait().status();
}

// Elements of `descs` loaded from `root` that differ from the pattern.
int64_t ReloadMismatches(const std::string& root, const std::vector<ShardedTensor>& descs) {
  OwnedState back;
  for (const ShardedTensor& d : descs) back.Add(d, false);
  LoadOptions lo;
  lo.root = root;
  Status st = LoadCheckpoint(back.dict(), lo).status();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return st.ok() ? back.CountMismatches() : -1;
}

// A GPU-resident state: the snapshot is the D2H copy into pinned memory, so
// the checkpoint holds the values at Start although the device buffers are
// overwritten right after.
TEST(GpuTest, PinnedSnapshotOfDeviceTensorsSavesTheValuesAtStart) {
  if (gpu::QueryGpu().device_count == 0) GTEST_SKIP() << "needs a GPU";
  auto mem = gpu::MakePinnedSnapshotMemory();
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  EXPECT_EQ((*mem)->name(), "pinned");
  const std::vector<ShardedTensor> descs = {Desc("w", DType::kBFloat16, {1024, 256}, {0, 0}, {1024, 256}),
                                            Desc("b", DType::kFloat32, {1024}, {0}, {1024})};
  OwnedState host;
  for (const ShardedTensor& d : descs) host.Add(d, true);
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
  Status st = SaveAsync(mem->get(), on_device, root, [&] {
    for (size_t i = 0; i < device_ptrs.size(); ++i)
      EXPECT_EQ(cudaMemset(device_ptrs[i], 0xff, on_device.tensors()[i].data.size()), cudaSuccess);
  });
  for (void* d : device_ptrs) cudaFree(d);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ReloadMismatches(root, descs), 0);
}

// Host tensors through pinned memory: memcpy path, same contract.
TEST(GpuTest, PinnedSnapshotOfHostTensorsIsolatesTheBuffers) {
  if (gpu::QueryGpu().device_count == 0) GTEST_SKIP() << "needs a GPU";
  auto mem = gpu::MakePinnedSnapshotMemory();
  ASSERT_TRUE(mem.ok()) << mem.status().ToString();
  const std::vector<ShardedTensor> descs = {Desc("w", DType::kFloat32, {256, 64}, {0, 0}, {256, 64})};
  OwnedState s;
  s.Add(descs[0], true);
  const std::string root = testing::ScratchDir("gpu_pinned_host");
  Status st = SaveAsync(mem->get(), s.dict(), root, [&] {
    std::memset(s.dict().tensors()[0].data.data(), 0, s.dict().tensors()[0].data.size());
  });
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ReloadMismatches(root, descs), 0);
}
#endif

}  // namespace
}  // namespace ckpt
