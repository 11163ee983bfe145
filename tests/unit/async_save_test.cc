// AsyncSaver: the snapshot decouples training buffers from the background
// save, saves are serialised, and a failing background save publishes nothing.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <latch>
#include <thread>

#include "ckpt/protocol/async_save.h"
#include "support/state_util.h"
#include "support/test_util.h"
#include "tests/testing/async_controls.h"

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

}  // namespace
}  // namespace ckpt
