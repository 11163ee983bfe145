// The library side of `ckpt train` and job start-up (ckpt/workload/
// train_loop.h, job_setup.h): the save schedule, stop after the first save,
// the summary, a real multi-rank run with threads as ranks, and the model /
// layout resolution with its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <thread>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/workload/exit_signal.h"
#include "ckpt/workload/job_setup.h"
#include "ckpt/workload/train_loop.h"
#include "reshard/gpt_config_json.h"
#include "harness/test_util.h"

namespace ckpt::workload {
namespace {

TrainConfig Config() {
  TrainConfig c;
  c.global_batch = 8;
  c.micro_batch = 1;
  c.lr.warmup_steps = 1;
  c.model = nlohmann::json{{"preset", "tiny"}};
  return c;
}

std::unique_ptr<TrainWorkload> Rank(const std::string& spec, int rank) {
  const ParallelConfig pc = *ParallelConfig::Parse(spec);
  auto w = TrainWorkload::Create(Config(), *reshard::GptPreset("tiny"), pc, *CoordsOf(pc, rank));
  EXPECT_TRUE(w.ok()) << w.status().ToString();
  return std::move(w).value();
}

// Records the iterations it was asked to save, and the joins.
class Recorder final : public TrainCheckpointer {
 public:
  Result<std::string> Save(TrainWorkload& w) override {
    saved.push_back(w.iteration());
    return "saved " + std::to_string(w.iteration()) + "\n";
  }
  Result<std::string> Finish(int64_t) override {
    ++finishes;
    return std::string();
  }
  void OnStep() override { ++steps; }
  std::vector<int64_t> saved;
  int finishes = 0, steps = 0;
};

TEST(TrainLoopTest, ParsesScheduleAndPolicy) {
  EXPECT_EQ(*ParseSaveAt("5,10,3"), (std::set<int64_t>{3, 5, 10}));
  EXPECT_TRUE(ParseSaveAt("")->empty());
  EXPECT_EQ(ParseSaveAt("5,x").status().code(), Code::kInvalidArgument);
  EXPECT_NE(ParseSaveAt("5,7b").status().message().find("'7b'"), std::string::npos);
  EXPECT_EQ(*ParseNonFinitePolicy("warn"), NonFinitePolicy::kWarn);
  EXPECT_EQ(ParseNonFinitePolicy("ignore").status().code(), Code::kInvalidArgument);
}

TEST(TrainLoopTest, SavesOnScheduleAndSummarizes) {
  auto w = Rank("tp=1", 0);
  w->Initialize();
  LocalCollectives coll;
  Recorder rec;
  std::vector<std::string> log;
  auto r = RunTrainLoop(*w, coll, rec, {.steps = 6, .save_every = 4, .save_at = {3}},
                        [&](const std::string& s) { log.push_back(s); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(rec.saved, (std::vector<int64_t>{3, 4, 6}));  // save_at, every 4, and always the last
  EXPECT_EQ(rec.finishes, 1);
  EXPECT_EQ(rec.steps, 6);
  EXPECT_EQ(log.size(), 3u);
  EXPECT_FALSE(r->stopped_early);
  const nlohmann::json s = TrainSummary(*w, *r);
  EXPECT_EQ(s["iteration"], 6);
  EXPECT_EQ(s["consumed_samples"], 6 * 8);
  EXPECT_TRUE(s["samples_exactly_once"].get<bool>());
  EXPECT_TRUE(s["consumed_matches_iterations"].get<bool>());
  EXPECT_NE(TrainSummaryLine(s).find("iterations 0 -> 6"), std::string::npos) << TrainSummaryLine(s);
}

TEST(TrainLoopTest, StopsAfterTheFirstSaveAndJoinsIt) {
  auto w = Rank("tp=1", 0);
  w->Initialize();
  LocalCollectives coll;
  Recorder rec;
  auto r = RunTrainLoop(*w, coll, rec, {.steps = 10, .save_every = 3, .stop_after_first_save = true}, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped_early);
  EXPECT_EQ(w->iteration(), 3);
  EXPECT_EQ(rec.saved, (std::vector<int64_t>{3}));
  EXPECT_EQ(rec.finishes, 1);
}

// Preemption: once every rank agrees a signal came (stop_requested), the loop
// saves that iteration - off the save schedule - joins it and leaves.
TEST(TrainLoopTest, AnExitSignalSavesTheCurrentIterationAndLeaves) {
  auto w = Rank("tp=1", 0);
  w->Initialize();
  LocalCollectives coll;
  Recorder rec;
  std::vector<std::string> log;
  int asked = 0;
  TrainLoopOptions o{.steps = 100, .save_every = 4, .log_interval = 2};
  o.stop_requested = [&]() -> Result<bool> { return ++asked == 7; };
  auto r = RunTrainLoop(*w, coll, rec, o, [&](const std::string& s) { log.push_back(s); });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->stopped_by_signal);
  EXPECT_EQ(w->iteration(), 7);
  EXPECT_EQ(rec.saved, (std::vector<int64_t>{4, 7}));  // the schedule's 4, then the signal's 7
  EXPECT_EQ(rec.finishes, 1);
  EXPECT_TRUE(TrainSummary(*w, *r)["exit_signal"].get<bool>());
  EXPECT_EQ(std::count(log.begin(), log.end(), "train: iteration 6\n"), 1);
  o.stop_requested = []() -> Result<bool> { return Status::Timeout("rank 1 did not answer"); };
  EXPECT_EQ(RunTrainLoop(*w, coll, rec, o, nullptr).status().code(), Code::kTimeout);
}

TEST(ExitSignalTest, TheHandlerOnlySetsAFlagThatAnyRankSeesAndIsRestored) {
  auto sig = ExitSignal::Install(SIGUSR2);
  ASSERT_TRUE(sig.ok()) << sig.status().ToString();
  EXPECT_EQ(ExitSignal::Install(SIGUSR2).status().code(), Code::kFailedPrecondition);
  EXPECT_FALSE((*sig)->received());
  LocalComm one;
  EXPECT_FALSE(*(*sig)->AnyRankReceived(one, Millis(1000)));
  ASSERT_EQ(std::raise(SIGUSR2), 0);  // the process survives: the handler only sets the flag
  EXPECT_TRUE((*sig)->received());
  EXPECT_TRUE(*(*sig)->AnyRankReceived(one, Millis(1000)));
  sig->reset();
  EXPECT_TRUE(ExitSignal::Install(SIGUSR2).ok());  // installable again once the first is gone
}

// Saves through the real protocol on the job's communicator.
class SyncSaver final : public TrainCheckpointer {
 public:
  SyncSaver(Comm* comm, std::string root) : comm_(comm), root_(std::move(root)) {}
  Result<std::string> Save(TrainWorkload& w) override {
    SaveOptions o;
    o.root = root_;
    o.iteration = w.iteration();
    o.comm = comm_;
    o.nonfinite = NonFinitePolicy::kRefuse;
    CKPT_RETURN_IF_ERROR(SaveCheckpoint(w.SaveDict({}), o).status());
    return std::string("saved\n");
  }
  Result<std::string> Finish(int64_t) override { return std::string(); }

 private:
  Comm* comm_;
  std::string root_;
};

// Threads as ranks: a DP2 job trains and checkpoints through the loop; each
// rank's loop returns the same summary and the tracker ends at the last save.
TEST(TrainLoopTest, ThreadRanksTrainAndCheckpointTogether) {
  const std::string root = testing::ScratchDir("train_loop_dp2");
  auto world = MakeThreadComms(2), dp = MakeThreadComms(2);
  std::vector<std::unique_ptr<TrainWorkload>> ranks;
  for (int r = 0; r < 2; ++r) ranks.push_back(Rank("dp=2", r));
  std::vector<Result<TrainLoopResult>> res(2, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ranks[r]->Initialize();
      CommCollectives coll(nullptr, dp[r].get(), Millis(60000));
      SyncSaver saver(world[r].get(), root);
      res[r] = RunTrainLoop(*ranks[r], coll, saver, {.steps = 4, .save_every = 2}, nullptr);
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) ASSERT_TRUE(res[r].ok()) << r << ": " << res[r].status().ToString();
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root), 4);
  EXPECT_EQ(TrainSummary(*ranks[0], *res[0])["rng_offset"], TrainSummary(*ranks[1], *res[1])["rng_offset"]);
  EXPECT_TRUE(TrainSummary(*ranks[0], *res[0])["samples_exactly_once"].get<bool>());
}

TEST(JobSetupTest, LayoutMustMatchTheJob) {
  auto comms = MakeThreadComms(2);
  auto bad = JobLayout("tp=4", *comms[0]);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("needs 4 ranks, but the job has 2"), std::string::npos);
  auto good = JobLayout("tp=2", *comms[1]);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(JobCoords(*good, *comms[1])->tp, 1);
}

// `ckpt save` under mpirun -np 2 without --layout (the default "tp=1"): DP =
// world; an explicit dp that does not fit, or a world tp*pp*cp does not
// divide, is refused saying why.
TEST(JobSetupTest, LayoutWithoutDpTakesTheWorldAsDp) {
  auto comms = MakeThreadComms(2);
  auto dp = JobLayout("tp=1", *comms[1]);
  ASSERT_TRUE(dp.ok()) << dp.status().ToString();
  EXPECT_EQ(dp->dp, 2);
  EXPECT_EQ(JobCoords(*dp, *comms[1])->dp, 1);
  auto pinned = JobLayout("tp=1,dp=1", *comms[0]);
  ASSERT_FALSE(pinned.ok());
  EXPECT_NE(pinned.status().message().find("needs 1 ranks, but the job has 2"), std::string::npos);
  auto odd = JobLayout("tp=4", *comms[0]);
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.status().message().find("dp = world / (tp*pp*cp) is not whole"), std::string::npos)
      << odd.status().ToString();
}

TEST(JobSetupTest, ResolvesPresetsOverridesJsonAndCheckpointConfigs) {
  std::string name;
  auto m = ResolveModel("tiny:num_layers=4", "", -1, &name);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(name, "tiny");
  EXPECT_EQ(m->num_layers, 4);
  EXPECT_EQ(ResolveModel("tiny:no_such_key=1", "", -1, &name).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ResolveModel("{not json", "", -1, &name).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ResolveModel("{\"hidden\": \"wide\"}", "", -1, &name).status().code(), Code::kInvalidArgument);
  auto json_cfg = ResolveModel(reshard::GptConfigToJson(*m).dump(), "", -1, &name);
  ASSERT_TRUE(json_cfg.ok()) << json_cfg.status().ToString();
  EXPECT_EQ(name, "custom");

  const std::string root = testing::ScratchDir("job_setup_model");
  auto w = Rank("tp=1", 0);
  w->Initialize();
  SaveOptions o;
  o.root = root;
  o.iteration = 1;
  o.metadata = {{"model", "tiny"}, {"gpt", reshard::GptConfigToJson(*m)}};
  ASSERT_TRUE(SaveCheckpoint(w->SaveDict({}), o).ok());
  auto saved = ResolveModel(":num_layers=2", root, -1, &name);
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();
  EXPECT_EQ(name, "tiny");
  EXPECT_EQ(saved->num_layers, 2);
  EXPECT_EQ(ResolveModel("", testing::ScratchDir("job_setup_none"), -1, &name).status().code(), Code::kNotFound);
}

}  // namespace
}  // namespace ckpt::workload
