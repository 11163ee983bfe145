// AsyncSaver: the snapshot decouples training buffers from the background
// save, saves are serialised, and a failing background save publishes nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <latch>
#include <thread>

#include "ckpt/base/stream_copy.h"
#include "ckpt/protocol/async_save.h"
#include "harness/state_util.h"
#include "harness/test_util.h"
#include "harness/async_controls.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;

SaveOptions Opts(const std::string& root, int64_t iter) {
  SaveOptions o;
  o.root = root;
  o.iteration = iter;
  o.write.chunk_bytes = 8192;
  return o;
}

TEST(AsyncSaveTest, SnapshotIsolatesTrainingBuffersFromTheBackgroundSave) {
  const std::string root = testing::ScratchDir("async");
  LocalComm comm;
  AsyncSaver saver(&comm);
  OwnedState s;
  s.Add(Desc("w", DType::kFloat32, {512, 64}, {0, 0}, {512, 64}), true);
  auto started = saver.Start(s.dict(), Opts(root, 1));
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_EQ(started->snapshot_bytes, 512 * 64 * 4);
  // "Training" overwrites its buffer while the save runs.
  std::memset(s.dict().tensors()[0].data.data(), 0xff, s.dict().tensors()[0].data.size());
  auto done = saver.Wait();
  ASSERT_TRUE(done.ok()) << done.status().ToString();

  OwnedState d;
  d.Add(Desc("w", DType::kFloat32, {512, 64}, {0, 0}, {512, 64}), false);
  LoadOptions lo;
  lo.root = root;
  ASSERT_TRUE(LoadCheckpoint(d.dict(), lo).ok());
  EXPECT_EQ(d.CountMismatches(), 0);  // the snapshot, not the overwritten buffer
}

TEST(AsyncSaveTest, NextStartWaitsForThePreviousSaveAndReportsItsError) {
  const std::string root = testing::ScratchDir("async2");
  LocalComm comm;
  AsyncSaver saver(&comm);
  OwnedState s;
  s.Add(Desc("w", DType::kBFloat16, {256, 32}, {0, 0}, {256, 32}), true);
  ASSERT_TRUE(saver.Start(s.dict(), Opts(root, 1)).ok());
  SaveOptions failing = Opts(root, 2);
  failing.hook = [](std::string_view step, int) {
    return step == "dir_rename" ? Status::IOError("injected: crash before the dir rename") : Status::Ok();
  };
  ASSERT_TRUE(saver.Start(s.dict(), failing).ok());  // waits for iteration 1 first
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root), 1);
  auto third = saver.Start(s.dict(), Opts(root, 3));
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("injected"), std::string::npos) << third.status().ToString();
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root), 1);  // the failed save never became latest
  EXPECT_FALSE(std::filesystem::exists(root + "/" + IterDirName(2)));
  EXPECT_FALSE(saver.in_flight());
}

TEST(AsyncSaveTest, ThreadRanksSaveInTheBackground) {
  const std::string root = testing::ScratchDir("async3");
  auto comms = MakeThreadComms(2);
  std::vector<std::thread> threads;
  std::vector<Status> st(2);
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      AsyncSaver saver(comms[r].get());
      OwnedState s;
      s.Add(Desc("w", DType::kFloat32, {64, 8}, {32 * r, 0}, {32, 8}), true);
      for (int it = 1; it <= 3 && st[r].ok(); ++it) st[r] = saver.Start(s.dict(), Opts(root, it)).status();
      if (st[r].ok()) st[r] = saver.Wait().status();
    });
  }
  for (auto& t : threads) t.join();
  for (auto& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root), 3);
}


// The negative control: without a snapshot the background save reads the
// live buffers, so an overwrite made before it reads them lands in the
// checkpoint (a test that would pass with the control would prove nothing).
// A latch (not a sleep) holds the background save until the overwrite is done.
TEST(AsyncSaveTest, NoSnapshotControlSavesWhatTrainingWroteAfterStart) {
  const std::string root = testing::ScratchDir("async_nosnap");
  LocalComm comm;
  AsyncSaver saver(&comm);
  testing::AsyncSaveControls::NoSnapshot(saver);
  std::latch overwritten(1);
  testing::AsyncSaveControls::BeforeSave(saver, [&overwritten] { overwritten.wait(); });
  OwnedState s;
  s.Add(Desc("w", DType::kFloat32, {128, 16}, {0, 0}, {128, 16}), true);
  auto started = saver.Start(s.dict(), Opts(root, 1));
  if (!started.ok()) overwritten.count_down();
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_EQ(started->snapshot_bytes, 0);
  std::memset(s.dict().tensors()[0].data.data(), 0, s.dict().tensors()[0].data.size());
  overwritten.count_down();
  ASSERT_TRUE(saver.Wait().ok());

  OwnedState d;
  d.Add(Desc("w", DType::kFloat32, {128, 16}, {0, 0}, {128, 16}), false);
  LoadOptions lo;
  lo.root = root;
  ASSERT_TRUE(LoadCheckpoint(d.dict(), lo).ok());
  EXPECT_GT(d.CountMismatches(), 0);  // the overwritten values, not those at Start
}

// The test hook holds the background save before it reads anything; the
// saver reports when reading began and the background time, delay included.
TEST(AsyncSaveTest, DelayHookHoldsTheBackgroundSaveAndIsReported) {
  const std::string root = testing::ScratchDir("async_delay");
  LocalComm comm;
  AsyncSaver saver(&comm);
  testing::AsyncSaveControls::DelayBeforeSave(saver, Millis(200));
  OwnedState s;
  s.Add(Desc("w", DType::kFloat32, {64, 8}, {0, 0}, {64, 8}), true);
  EXPECT_EQ(saver.last_background_seconds(), 0);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(saver.Start(s.dict(), Opts(root, 1)).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(150));  // Start does not sleep
  ASSERT_TRUE(saver.Wait().ok());
  EXPECT_GE(saver.last_save_began() - t0, std::chrono::milliseconds(200));
  EXPECT_GE(saver.last_background_seconds(), 0.2);
  // The next Start joins nothing (the previous was joined) and reports no previous.
  auto next = saver.Start(s.dict(), Opts(root, 2));
  ASSERT_TRUE(next.ok());
  EXPECT_FALSE(next->joined_previous);
  auto third = saver.Start(s.dict(), Opts(root, 3));  // joins iteration 2
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->joined_previous);
  EXPECT_GT(third->wait_previous_seconds, 0.05);  // iteration 2 was still held by the hook
  EXPECT_GT(third->previous.bytes_written, 0);
  ASSERT_TRUE(saver.Wait().ok());
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root), 3);
}

// Loads iteration `iter` of `root` into fresh buffers shaped like `s` and
// counts the elements that differ from the pattern.
int64_t LoadedMismatches(const std::string& root, int64_t iter, const std::vector<ShardedTensor>& metas) {
  OwnedState d;
  for (const ShardedTensor& m : metas) d.Add(m, false);
  LoadOptions lo;
  lo.root = root;
  lo.iteration = iter;
  Status st = LoadCheckpoint(d.dict(), lo).status();
  EXPECT_TRUE(st.ok()) << st.ToString();
  return st.ok() ? d.CountMismatches() : -1;
}

std::vector<ShardedTensor> Metas(const ShardedStateDict& sd) {
  std::vector<ShardedTensor> m;
  for (const TensorEntry& t : sd.tensors()) m.push_back(t.meta);
  return m;
}

// Reserve allocates the arena ahead: the first save then allocates nothing
// and blocks only for the copy; the arena is the one reserved.
TEST(AsyncSaveTest, ReserveAllocatesTheArenaBeforeTheFirstSave) {
  const std::string root = testing::ScratchDir("async_reserve");
  LocalComm comm;
  AsyncSaver saver(&comm);
  OwnedState s;
  s.Add(Desc("a", DType::kFloat32, {300, 70}, {0, 0}, {300, 70}), true);
  s.Add(Desc("b", DType::kBFloat16, {33}, {0}, {33}), true);  // odd size: the next tensor is padded to 64
  s.Add(Desc("c", DType::kFloat32, {1024, 512}, {0, 0}, {1024, 512}), true);  // above the streaming threshold
  const int64_t need = AsyncSaver::ArenaBytes(s.dict());
  EXPECT_GE(need, s.dict().TotalBytes());
  EXPECT_LT(need, s.dict().TotalBytes() + 3 * 64);
  EXPECT_EQ(saver.arena_allocations(), 0);
  ASSERT_TRUE(saver.Reserve(need).ok());
  EXPECT_EQ(saver.arena_allocations(), 1);
  EXPECT_EQ(saver.arena_capacity(), need);
  EXPECT_FALSE(saver.Reserve(-1).ok());
  auto started = saver.Start(s.dict(), Opts(root, 1));
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  EXPECT_EQ(started->allocate_seconds, 0);  // nothing allocated in the blocking part
  EXPECT_EQ(saver.arena_allocations(), 1);
  for (TensorEntry& t : s.dict().tensors()) std::memset(t.data.data(), 0x5a, t.data.size());  // training goes on
  ASSERT_TRUE(saver.Wait().ok());
  EXPECT_EQ(LoadedMismatches(root, 1, Metas(s.dict())), 0);
}

// The arena grows only: a smaller state reuses it (its tensors at new
// offsets), a larger one replaces it; every save holds its own state's values.
TEST(AsyncSaveTest, ArenaIsReusedAcrossSavesOfDifferentSizes) {
  const std::string root = testing::ScratchDir("async_arena");
  LocalComm comm;
  AsyncSaver saver(&comm);
  OwnedState big, small, bigger;
  big.Add(Desc("x", DType::kFloat32, {256, 64}, {0, 0}, {256, 64}), true);
  big.Add(Desc("y", DType::kFloat32, {128, 64}, {0, 0}, {128, 64}), true);
  small.Add(Desc("y", DType::kBFloat16, {100, 3}, {0, 0}, {100, 3}), true);
  small.Add(Desc("z", DType::kFloat32, {64, 64}, {0, 0}, {64, 64}), true);
  bigger.Add(Desc("x", DType::kFloat32, {512, 256}, {0, 0}, {512, 256}), true);
  ASSERT_TRUE(saver.Start(big.dict(), Opts(root, 1)).ok());
  const int64_t cap = saver.arena_capacity();
  EXPECT_EQ(cap, AsyncSaver::ArenaBytes(big.dict()));
  auto second = saver.Start(small.dict(), Opts(root, 2));
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->allocate_seconds, 0);
  EXPECT_EQ(saver.arena_allocations(), 1);
  EXPECT_EQ(saver.arena_capacity(), cap);
  auto third = saver.Start(bigger.dict(), Opts(root, 3));
  ASSERT_TRUE(third.ok()) << third.status().ToString();
  EXPECT_EQ(saver.arena_allocations(), 2);
  EXPECT_EQ(saver.arena_capacity(), AsyncSaver::ArenaBytes(bigger.dict()));
  EXPECT_GT(saver.arena_capacity(), cap);
  ASSERT_TRUE(saver.Wait().ok());
  EXPECT_EQ(LoadedMismatches(root, 1, Metas(big.dict())), 0);
  EXPECT_EQ(LoadedMismatches(root, 2, Metas(small.dict())), 0);
  EXPECT_EQ(LoadedMismatches(root, 3, Metas(bigger.dict())), 0);
  ASSERT_TRUE(saver.Reserve(cap).ok());  // already larger: no reallocation
  EXPECT_EQ(saver.arena_allocations(), 2);
}

// Tensors that are consecutive views of one buffer (a flat parameter buffer)
// are packed in the arena and copied as one block; the bytes survive intact.
TEST(AsyncSaveTest, AdjacentViewsArePackedAndCopiedAsOneBlock) {
  const std::string root = testing::ScratchDir("async_packed");
  LocalComm comm;
  AsyncSaver saver(&comm);
  OwnedState src;
  src.Add(Desc("p", DType::kFloat32, {3, 1001}, {0, 0}, {3, 1001}), true);
  src.Add(Desc("q", DType::kFloat32, {1, 4004}, {0, 0}, {1, 4004}), true);
  // Two tensors over one buffer: p's bytes, then q's, back to back.
  const TensorEntry& p = src.dict().tensors()[0];
  const TensorEntry& q = src.dict().tensors()[1];
  std::vector<std::byte> flat(p.data.size() + q.data.size());
  std::memcpy(flat.data(), p.data.data(), p.data.size());
  std::memcpy(flat.data() + p.data.size(), q.data.data(), q.data.size());
  ShardedStateDict views;
  views.AddTensor(p.meta, std::span<std::byte>(flat).first(p.data.size()));
  views.AddTensor(q.meta, std::span<std::byte>(flat).subspan(p.data.size()));
  EXPECT_EQ(AsyncSaver::ArenaBytes(views), int64_t(flat.size()));  // packed: no padding
  EXPECT_GT(AsyncSaver::ArenaBytes(src.dict()), int64_t(flat.size()));  // separate buffers: q padded to 64
  ASSERT_TRUE(saver.Start(views, Opts(root, 1)).ok());
  std::fill(flat.begin(), flat.end(), std::byte{0});
  ASSERT_TRUE(saver.Wait().ok());
  EXPECT_EQ(LoadedMismatches(root, 1, Metas(views)), 0);
}

// StreamCopy equals memcpy for every size and alignment around its threshold
// and its cache-line body.
TEST(StreamCopyTest, MatchesMemcpyAtAnyAlignmentAndSize) {
  const size_t max = kStreamCopyMinBytes + 1000;
  std::vector<std::byte> src(max + 64), dst(max + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::byte(i * 131 + 7);
  for (size_t n : {size_t(0), size_t(1), size_t(63), kStreamCopyMinBytes - 1, kStreamCopyMinBytes,
                   kStreamCopyMinBytes + 1, kStreamCopyMinBytes + 63, max}) {
    for (size_t so : {0, 1, 17}) {
      for (size_t dof : {0, 5, 48}) {
        std::fill(dst.begin(), dst.end(), std::byte{0xee});
        StreamCopy(dst.data() + dof, src.data() + so, n);
        ASSERT_EQ(std::memcmp(dst.data() + dof, src.data() + so, n), 0) << n << " " << so << " " << dof;
        if (dof > 0) {
          ASSERT_EQ(dst[dof - 1], std::byte{0xee});
        }
        if (dof + n < dst.size()) {
          ASSERT_EQ(dst[dof + n], std::byte{0xee}) << n << " " << so << " " << dof;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ckpt
