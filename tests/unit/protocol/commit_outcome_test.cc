// Who learns what when a rank fails (threads as ranks): rank 0's gather
// failure reaches every survivor naming the missing rank; a rank failing
// validate or the plan step makes everyone fail at once; errors after the
// commit point are warnings on a committed, loadable iteration; "latest".
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ckpt/base/clock.h"
#include "ckpt/base/status_wire.h"
#include "ckpt/protocol/checkpoint.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

bool Has(const Status& s, const std::string& part) { return s.message().find(part) != std::string::npos; }

// Runs fn(rank, comm) on `n` thread-ranks; returns each rank's status.
std::vector<Status> OnRanks(int n, const std::function<Status(int, Comm*)>& fn) {
  auto comms = MakeThreadComms(n);
  std::vector<Status> st(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back([&, r] { st[r] = fn(r, comms[r].get()); });
  for (auto& t : threads) t.join();
  return st;
}

TEST(StatusWireTest, RoundTripsAndRejectsGarbage) {
  Status s = Status::NoSpace("disk full: 'x'");
  Status back = DecodeStatus(EncodeStatus(s));
  EXPECT_EQ(back.code(), Code::kNoSpace);
  EXPECT_EQ(back.message(), s.message());
  EXPECT_TRUE(DecodeStatus(EncodeStatus(Status::Ok())).ok());
  EXPECT_EQ(DecodeStatus("nonsense").code(), Code::kInternal);
  EXPECT_EQ(DecodeStatus("99:x").code(), Code::kInternal);
}

// Rank 2 never shows up: rank 0's gather times out naming it, and every other
// rank hears that from rank 0 (before: they timed out naming rank 0).
TEST(GatherDecideTest, RootTimeoutReachesEverySurvivorNamingTheMissingRank) {
  const Millis t(300);
  const auto t0 = Clock::now();
  auto st = OnRanks(4, [&](int r, Comm* c) -> Status {
    if (r == 2) return Status::Ok();
    return c->AllGather("x", t, Phase::kVote).status();
  });
  EXPECT_LT(Since(t0), 0.3 + 0.5);
  for (int r : {0, 1, 3}) {
    EXPECT_EQ(st[r].code(), Code::kTimeout) << r << ": " << st[r].ToString();
    EXPECT_TRUE(Has(st[r], "no answer from rank 2 in phase 'vote'")) << st[r].ToString();
  }
  EXPECT_TRUE(Has(st[1], "rank 1: aborted by rank 0: ")) << st[1].ToString();
}

// Rank 0 never shows up: the others time out naming it, after DecisionTimeout.
TEST(GatherDecideTest, DeadRootIsNamedWithinTheDecisionTimeout) {
  const Millis t(200);
  const auto t0 = Clock::now();
  auto st = OnRanks(3, [&](int r, Comm* c) -> Status {
    if (r == 0) return Status::Ok();
    return c->AllGather("x", t, Phase::kLoad).status();
  });
  const double secs = Since(t0);
  const double wait = double(DecisionTimeout(t).count()) / 1000;  // 0.25 s
  EXPECT_GE(secs, wait - 0.01);
  EXPECT_LT(secs, wait + 0.5);
  for (int r : {1, 2}) EXPECT_TRUE(Has(st[r], "no answer from rank 0 in phase 'load'")) << st[r].ToString();
}

SaveOptions Opts(const std::string& root, int64_t iter, Comm* comm) {
  SaveOptions o;
  o.root = root;
  o.iteration = iter;
  o.comm = comm;
  o.write.chunk_bytes = 4096;
  return o;
}

// Rank r of `n` holds rows [100 r, 100 r + 100) of "w" (300 x 10 for n = 3).
void AddRows(OwnedState& s, int r, int n, bool fill) {
  s.Add(Desc("w", DType::kFloat32, {100 * n, 10}, {100 * r, 0}, {100, 10}), fill);
}

// One rank's save of its rows of "w" (rank `bad_rank` registers a
// descriptor outside the global shape, so its Validate fails).
Result<SaveStats> SaveRank(const std::string& root, int64_t iter, int n, int r, Comm* c, const StepHook& hook,
                           Millis timeout, int bad_rank) {
  OwnedState s;
  if (r == bad_rank)
    s.Add(Desc("w", DType::kFloat32, {100 * n, 10}, {100 * n, 0}, {100, 10}), true);
  else
    AddRows(s, r, n, true);
  SaveOptions o = Opts(root, iter, c);
  o.hook = hook;
  o.timeout = timeout;
  return SaveCheckpoint(s.dict(), o);
}

std::vector<Status> SaveEach(const std::string& root, int64_t iter, int n, const StepHook& hook, Millis timeout,
                             int bad_rank = -1, std::vector<SaveStats>* stats = nullptr) {
  if (stats) stats->assign(n, SaveStats{});
  return OnRanks(n, [&](int r, Comm* c) -> Status {
    auto res = SaveRank(root, iter, n, r, c, hook, timeout, bad_rank);
    if (res.ok() && stats) (*stats)[r] = *res;
    return res.status();
  });
}

// The first failing rank's status, or OK.
Status SaveAll(const std::string& root, int64_t iter, int n, const StepHook& hook, Millis timeout,
               std::vector<SaveStats>* stats = nullptr) {
  for (const auto& s : SaveEach(root, iter, n, hook, timeout, -1, stats))
    if (!s.ok()) return s;
  return Status::Ok();
}

bool NoTmpDirs(const std::string& root) {
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().filename().string().rfind(".iter_", 0) == 0) return false;
  return true;
}

class FailFast : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::ScratchDir("failfast");
    ASSERT_TRUE(SaveAll(root_, 5, 3, nullptr, Millis(20000)).ok());
  }
  void ExpectAllFailedFastNaming(const std::vector<Status>& st, double secs, const std::string& who,
                                 const std::string& phase) {
    EXPECT_LT(secs, 2.0) << "a rank waited for the failed one (deadline 20 s)";
    for (const auto& s : st) {
      EXPECT_FALSE(s.ok());
      EXPECT_TRUE(Has(s, who)) << s.ToString();
      EXPECT_TRUE(Has(s, "phase '" + phase + "'")) << s.ToString();
    }
    EXPECT_EQ(*ReadTracker(DefaultEnv(), root_), 5);
    EXPECT_FALSE(fs::exists(root_ + "/" + IterDirName(6)));
    EXPECT_TRUE(NoTmpDirs(root_));
  }
  std::string root_;
};

TEST_F(FailFast, PlanStepFailureTravelsInThePlanGather) {
  const auto t0 = Clock::now();
  auto st = SaveEach(root_, 6, 3, [](std::string_view step, int rank) {
    return step == "plan" && rank == 2 ? Status::IOError("injected plan failure") : Status::Ok();
  }, Millis(20000));
  ExpectAllFailedFastNaming(st, Since(t0), "rank 2", "plan");
  EXPECT_EQ(st[2].code(), Code::kIOError) << st[2].ToString();  // the failing rank keeps its own error
  EXPECT_TRUE(Has(st[0], "rank 2 failed: ")) << st[0].ToString();
}

TEST_F(FailFast, ValidateFailureOnOneRankTravelsInThePlanGather) {
  const auto t0 = Clock::now();
  auto st = SaveEach(root_, 6, 3, nullptr, Millis(20000), /*bad_rank=*/1);
  ExpectAllFailedFastNaming(st, Since(t0), "rank 1", "validate");
  EXPECT_EQ(st[1].code(), Code::kInvalidArgument) << st[1].ToString();
}

TEST_F(FailFast, ValidateFailureOnRootRemovesItsTmpDir) {
  const auto t0 = Clock::now();
  auto st = SaveEach(root_, 6, 3, nullptr, Millis(20000), /*bad_rank=*/0);
  ExpectAllFailedFastNaming(st, Since(t0), "rank 0", "validate");
}

class AfterCommit : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::ScratchDir("aftercommit");
    ASSERT_TRUE(SaveAll(root_, 5, 2, nullptr, Millis(20000)).ok());
  }
  // Loads `iter` on 2 ranks; OK iff every element is right.
  Status LoadAll(int64_t iter) {
    auto st = OnRanks(2, [&](int r, Comm* c) -> Status {
      OwnedState s;
      AddRows(s, r, 2, false);
      LoadOptions lo;
      lo.root = root_;
      lo.iteration = iter;
      lo.comm = c;
      auto res = LoadCheckpoint(s.dict(), lo);
      if (!res.ok()) return res.status();
      if (res->iteration != iter || s.CountMismatches() != 0) return Status::Internal("wrong values");
      return Status::Ok();
    });
    return st[0].ok() ? st[1] : st[0];
  }
  std::string root_;
};

// The tracker update fails after the durable rename: the save is committed
// with a warning on every rank (before: a failed save), the tracker lags,
// and LatestIteration still finds the new iteration, which loads.
TEST_F(AfterCommit, TrackerFailureIsACommittedSaveWithAWarning) {
  std::vector<SaveStats> stats;
  Status st = SaveAll(root_, 6, 2, [](std::string_view step, int) {
    return step == "tracker_update" ? Status::IOError("injected tracker failure") : Status::Ok();
  }, Millis(20000), &stats);
  ASSERT_TRUE(st.ok()) << st.ToString();
  for (const auto& s : stats) {
    EXPECT_EQ(s.warning.code(), Code::kIOError) << s.warning.ToString();
    EXPECT_EQ(s.warning.message().rfind("tracker update failed: IOError: injected tracker failure", 0), 0u)
        << s.warning.ToString();
  }
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root_), 5);
  EXPECT_EQ(*LatestIteration(DefaultEnv(), root_), 6);
  EXPECT_TRUE(LoadAll(6).ok());
  // The next save moves the tracker on as usual.
  ASSERT_TRUE(SaveAll(root_, 7, 2, nullptr, Millis(20000), &stats).ok());
  EXPECT_TRUE(stats[0].warning.ok()) << stats[0].warning.ToString();
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root_), 7);
}

TEST_F(AfterCommit, CommitStepFailureIsAWarningOnThatRankOnly) {
  std::vector<SaveStats> stats;
  Status st = SaveAll(root_, 6, 2, [](std::string_view step, int rank) {
    return step == "commit" && rank == 1 ? Status::IOError("injected") : Status::Ok();
  }, Millis(20000), &stats);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(stats[0].warning.ok()) << stats[0].warning.ToString();
  EXPECT_TRUE(Has(stats[1].warning, "the 'commit' step failed on rank 1")) << stats[1].warning.ToString();
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root_), 6);
}

// Between the rename and the root fsync the save still fails, saying the
// directory is visible (it may not survive a crash).
TEST_F(AfterCommit, RootFsyncFailureFailsTheSaveSayingTheDirIsVisible) {
  Status st = SaveAll(root_, 6, 2, [](std::string_view step, int) {
    return step == "root_fsync" ? Status::IOError("injected") : Status::Ok();
  }, Millis(20000));
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(Has(st, "is visible but its rename may not survive a crash")) << st.ToString();
  EXPECT_TRUE(fs::exists(root_ + "/" + IterDirName(6)));
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root_), 5);
}

TEST_F(AfterCommit, LatestIterationSkipsUncommittedDirsAndNeedsNoTracker) {
  ASSERT_TRUE(SaveAll(root_, 6, 2, nullptr, Millis(20000)).ok());
  fs::create_directory(root_ + "/" + IterDirName(9));  // named like a checkpoint, no manifest
  EXPECT_EQ(*LatestIteration(DefaultEnv(), root_), 6);
  fs::remove(root_ + "/latest_checkpointed_iteration.txt");
  EXPECT_EQ(*LatestIteration(DefaultEnv(), root_), 6);
  std::ofstream(root_ + "/latest_checkpointed_iteration.txt") << "garbage\n";
  EXPECT_EQ(LatestIteration(DefaultEnv(), root_).status().code(), Code::kCorruption);
  const std::string empty = testing::ScratchDir("latest_empty");
  EXPECT_EQ(LatestIteration(DefaultEnv(), empty).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace ckpt
