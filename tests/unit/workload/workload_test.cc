// The deterministic training workload: Philox known answers, Megatron sampler
// and LR-schedule semantics, bitwise layout invariance of the elementwise mode
// (threads as ranks), TP dependence of tp-reduce, and strict, bitwise resume.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "ckpt/base/clock.h"
#include "ckpt/base/status_wire.h"
#include "ckpt/workload/collectives.h"
#include "ckpt/workload/philox.h"
#include "ckpt/workload/train_keys.h"
#include "ckpt/workload/train_workload.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt::workload {
namespace {

TEST(PhiloxTest, Random123KnownAnswers) {
  EXPECT_EQ(Philox4x32_10({0, 0, 0, 0}, {0, 0}), (PhiloxCounter{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(Philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}),
            (PhiloxCounter{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(Philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (PhiloxCounter{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
  EXPECT_EQ(SignedUnit(0x80000000u), -1.0f);
  EXPECT_LT(SignedUnit(0x7fffffffu), 1.0f);
  EXPECT_EQ(DataTarget(0), -2048);
  EXPECT_EQ(DataTarget(~0u), 2047);
}

std::vector<int64_t> Flatten(const std::vector<std::vector<int64_t>>& micro) {
  std::vector<int64_t> out;
  for (const auto& m : micro) out.insert(out.end(), m.begin(), m.end());
  return out;
}

TEST(SamplerTest, MegatronSlices) {
  std::vector<std::vector<std::vector<int64_t>>> got;
  for (int r = 0; r < 2; ++r) {
    auto s = PretrainingSampler::Create({100, 8, 2, r, 2}, 0);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->num_microbatches(), 2);
    auto b = s->NextGlobalBatch();
    ASSERT_TRUE(b.ok());
    got.push_back(*b);
    EXPECT_EQ(s->consumed_samples(), 8);
  }
  EXPECT_EQ(got[0], (std::vector<std::vector<int64_t>>{{0, 1}, {4, 5}}));
  EXPECT_EQ(got[1], (std::vector<std::vector<int64_t>>{{2, 3}, {6, 7}}));
}

// All DP ranks' samples of `batches` global batches from `consumed`, merged.
std::vector<int64_t> Consume(int dp, int64_t mbs, int64_t consumed, int batches, SampleLedger* ledger) {
  std::vector<int64_t> all;
  for (int r = 0; r < dp; ++r) {
    auto s = PretrainingSampler::Create({1000, 16, mbs, r, dp}, consumed);
    EXPECT_TRUE(s.ok());
    for (int b = 0; b < batches; ++b) {
      auto ids = Flatten(*s->NextGlobalBatch());
      for (int64_t id : ids) ledger->Add(id);
      all.insert(all.end(), ids.begin(), ids.end());
    }
  }
  return all;
}

TEST(SamplerTest, DpChangeNeitherSkipsNorRepeats) {
  SampleLedger ledger;
  std::vector<int64_t> all = Consume(4, 1, 0, 3, &ledger);      // 3 batches at dp=4, mbs=1
  std::vector<int64_t> more = Consume(2, 2, 48, 2, &ledger);    // resume at dp=2, mbs=2 from 48
  all.insert(all.end(), more.begin(), more.end());
  std::multiset<int64_t> ids(all.begin(), all.end());
  ASSERT_EQ(ids.size(), 80u);
  int64_t want = 0;
  for (int64_t id : ids) EXPECT_EQ(id, want++);
  EXPECT_EQ(ledger, SampleLedger::Range(0, 80));
  // Losing the iterator state (restart at 0) repeats samples, and the ledger shows it.
  SampleLedger lost;
  Consume(4, 1, 0, 3, &lost);
  Consume(2, 2, 0, 2, &lost);
  EXPECT_NE(lost, SampleLedger::Range(0, 80));
  EXPECT_EQ(lost.count, 80u);
}

TEST(SamplerTest, RejectsBadConfigAndExhaustion) {
  EXPECT_EQ(PretrainingSampler::Create({100, 10, 3, 0, 1}, 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(PretrainingSampler::Create({100, 8, 2, 2, 2}, 0).status().code(), Code::kInvalidArgument);
  auto s = PretrainingSampler::Create({20, 8, 2, 0, 2}, 8);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->NextGlobalBatch().ok());
  EXPECT_EQ(s->NextGlobalBatch().status().code(), Code::kFailedPrecondition);
}

TEST(LrScheduleTest, MegatronWarmupAndDecay) {
  LrConfig c{1.0, 0.1, 2, 10, "cosine"};
  LrScheduler s(c);
  std::vector<double> lrs;
  for (int i = 0; i <= 11; ++i, s.Step()) lrs.push_back(s.Lr());
  EXPECT_DOUBLE_EQ(lrs[0], 0.0);
  EXPECT_DOUBLE_EQ(lrs[1], 0.5);
  EXPECT_DOUBLE_EQ(lrs[2], 1.0);
  EXPECT_NEAR(lrs[6], 0.55, 1e-12);  // half way: 0.1 + 0.5 * 0.9
  EXPECT_DOUBLE_EQ(lrs[10], 0.1);
  EXPECT_DOUBLE_EQ(lrs[11], 0.1);
  LrScheduler lin(LrConfig{1.0, 0.1, 2, 10, "linear"});
  lin.Step(4);
  EXPECT_NEAR(lin.Lr(), 0.775, 1e-12);
  EXPECT_FALSE(LrConfig({1.0, 0.1, 10, 10, "cosine"}).Validate().ok());
}

TEST(LrScheduleTest, StateRoundTripIsStrict) {
  LrScheduler a(LrConfig{});
  a.Step(7);
  LrScheduler b(LrConfig{});
  ASSERT_TRUE(b.LoadState(a.StateJson()).ok());
  EXPECT_EQ(b.num_steps(), 7);
  EXPECT_EQ(b.Lr(), a.Lr());
  LrConfig other;
  other.max_lr = 2e-3;
  LrScheduler c(other);
  Status st = c.LoadState(a.StateJson());
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("max_lr"), std::string::npos) << st.ToString();
}

TEST(TrainConfigTest, CheckArgsNamesEveryDifference) {
  TrainConfig a, b;
  b.seed = 99;
  b.lr.max_lr = 5e-4;
  EXPECT_TRUE(CheckArgs(a.ArgsJson(), a.ArgsJson()).ok());
  Status st = CheckArgs(a.ArgsJson(), b.ArgsJson());
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("seed: checkpoint 1234, this job 99"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("lr.max_lr"), std::string::npos) << st.ToString();
}

TEST(ElementRunsTest, SplitsAndMerges) {
  auto t = testing::Desc("w", DType::kFloat32, {8, 6}, {4, 0}, {4, 6});  // axis-0 split: one run
  EXPECT_EQ(ElementRuns(t, 10), (std::vector<ElementRun>{{10, 24, 24}}));
  t = testing::Desc("w", DType::kFloat32, {2, 6}, {0, 3}, {2, 3});  // axis-1 split: a run per row
  EXPECT_EQ(ElementRuns(t, 0), (std::vector<ElementRun>{{0, 3, 3}, {3, 9, 3}}));
  t = testing::Desc("w", DType::kFloat32, {4, 2, 6}, {1, 0, 2}, {1, 2, 2});  // stacked layer 1
  EXPECT_EQ(ElementRuns(t, 0), (std::vector<ElementRun>{{0, 14, 2}, {2, 20, 2}}));
}

// ---- Whole-model runs with threads as ranks ----

TrainConfig Config(TrainMode mode = TrainMode::kElementwise) {
  TrainConfig c;
  c.mode = mode;
  c.global_batch = 8;
  c.micro_batch = 1;
  c.lr.warmup_steps = 1;
  c.model = nlohmann::json{{"preset", "tiny"}};
  return c;
}

// A job of threads: one TrainWorkload per rank, TP and DP groups over ThreadComm.
struct Job {
  ParallelConfig pc;
  std::vector<std::unique_ptr<TrainWorkload>> ranks;
  std::vector<std::unique_ptr<Comm>> endpoints;
  std::vector<std::unique_ptr<CommCollectives>> coll;

  Job(const std::string& spec, const TrainConfig& cfg) {
    pc = *ParallelConfig::Parse(spec);
    auto gpt = *reshard::GptPreset("tiny");
    const int world = pc.world_size();
    std::vector<Comm*> tp(size_t(world), nullptr), dp(size_t(world), nullptr);
    for (auto [group, slot] : {std::pair{Group::kTp, &tp}, std::pair{Group::kDp, &dp}}) {
      auto groups = AllGroups(pc, group);
      EXPECT_TRUE(groups.ok());
      for (const auto& members : *groups) {
        auto comms = MakeThreadComms(int(members.size()));
        for (size_t i = 0; i < members.size(); ++i) {
          (*slot)[size_t(members[i])] = comms[i].get();
          endpoints.push_back(std::move(comms[i]));
        }
      }
    }
    for (int r = 0; r < world; ++r) {
      auto w = TrainWorkload::Create(cfg, gpt, pc, *CoordsOf(pc, r));
      EXPECT_TRUE(w.ok()) << w.status().ToString();
      ranks.push_back(std::move(w).value());
      coll.push_back(std::make_unique<CommCollectives>(tp[size_t(r)], dp[size_t(r)], Millis(60000)));
    }
  }

  void Train(int steps) {
    std::vector<std::thread> threads;
    for (size_t r = 0; r < ranks.size(); ++r)
      threads.emplace_back([this, r, steps] {
        for (int i = 0; i < steps; ++i) ASSERT_TRUE(ranks[r]->Step(*coll[r]).ok());
      });
    for (auto& t : threads) t.join();
  }
  void Init() {
    for (auto& r : ranks) r->Initialize();
  }
};

// Global fp32 main params per key, assembled from every rank (indices of the
// padded shape of this layout; real vocabulary rows have the same index under every TP).
std::map<std::string, std::vector<float>> Global(const Job& job) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& w : job.ranks)
    for (size_t s = 0; s < w->shards().size(); ++s) {
      const ShardedTensor& t = w->shards()[s].tensor;
      auto& g = out[t.key];
      g.resize(size_t(NumElements(t.global_shape)), 0.0f);
      auto v = w->MainParams(s);
      testing::ForEachElement(t, [&](int64_t pos, int64_t gi) { g[size_t(gi)] = v[size_t(pos)]; });
    }
  return out;
}

// Keys whose common elements differ bitwise.
std::set<std::string> Differing(const std::map<std::string, std::vector<float>>& a,
                                const std::map<std::string, std::vector<float>>& b) {
  std::set<std::string> keys;
  for (const auto& [k, va] : a) {
    const auto& vb = b.at(k);
    const size_t n = std::min(va.size(), vb.size());
    if (std::memcmp(va.data(), vb.data(), n * sizeof(float)) != 0) keys.insert(k);
  }
  return keys;
}

TEST(WorkloadTest, ElementwiseIsBitwiseLayoutInvariant) {
  Job tp1("tp=1", Config()), tp4pp2("tp=4,pp=2", Config()), tp2dp2("tp=2,dp=2", Config());
  for (Job* j : {&tp1, &tp4pp2, &tp2dp2}) {
    j->Init();
    j->Train(3);
  }
  const auto ref = Global(tp1);
  EXPECT_EQ(ref.size(), Global(tp4pp2).size());
  EXPECT_TRUE(Differing(ref, Global(tp4pp2)).empty());
  EXPECT_TRUE(Differing(ref, Global(tp2dp2)).empty());
  // Training moved the weights (the comparison is not of an untouched init).
  Job fresh("tp=1", Config());
  fresh.Init();
  EXPECT_EQ(Differing(ref, Global(fresh)).size(), ref.size());
  EXPECT_EQ(tp2dp2.ranks[3]->ledger(), SampleLedger::Range(0, 24));
}

TEST(WorkloadTest, TpReduceDependsOnTpOnlyInRowParallelWeights) {
  Job tp1("tp=1", Config(TrainMode::kTpReduce)), tp2("tp=2", Config(TrainMode::kTpReduce)),
      again("tp=2", Config(TrainMode::kTpReduce));
  for (Job* j : {&tp1, &tp2, &again}) {
    j->Init();
    j->Train(3);
  }
  EXPECT_TRUE(Differing(Global(tp2), Global(again)).empty());
  const std::set<std::string> diff = Differing(Global(tp1), Global(tp2));
  EXPECT_FALSE(diff.empty());
  for (const std::string& k : diff)
    EXPECT_TRUE(k.ends_with("linear_proj.weight") || k.ends_with("linear_fc2.weight")) << k;
  // And tp-reduce really changes the training (not only its rounding).
  Job ew("tp=1", Config());
  ew.Init();
  ew.Train(3);
  EXPECT_EQ(Differing(Global(tp1), Global(ew)).size(), 16u);
}

class ResumeTest : public ::testing::Test {
 protected:
  // A one-rank job trained `steps` iterations from scratch or from the latest checkpoint under root_.
  std::unique_ptr<Job> Run(int steps, const ResumeParts& parts, bool resume, TrainConfig cfg = Config()) {
    auto job = std::make_unique<Job>("tp=1", cfg);
    if (resume) {
      status_ = job->ranks[0]->Resume(root_, -1, nullptr, parts, Millis(10000), nullptr);
      if (!status_.ok()) return nullptr;
    } else {
      job->Init();
    }
    job->Train(steps);
    return job;
  }
  Status Save(Job& job, const ResumeParts& parts, NonFinitePolicy nonfinite = NonFinitePolicy::kRefuse) {
    SaveOptions o;
    o.root = root_;
    o.iteration = job.ranks[0]->iteration();
    o.nonfinite = nonfinite;
    ShardedStateDict sd = job.ranks[0]->SaveDict(parts);
    return SaveCheckpoint(sd, o).status();
  }
  std::string root_ = testing::ScratchDir("resume");
  Status status_;
};

TEST_F(ResumeTest, ResumeIsBitwiseAndNegativeControlsDiffer) {
  const ResumeParts all;
  auto straight = Run(6, all, false);
  auto first = Run(3, all, false);
  ASSERT_TRUE(Save(*first, all).ok());
  auto resumed = Run(3, all, true);
  ASSERT_TRUE(resumed) << status_.ToString();
  EXPECT_TRUE(Differing(Global(*straight), Global(*resumed)).empty());
  EXPECT_EQ(resumed->ranks[0]->ledger(), straight->ranks[0]->ledger());
  EXPECT_EQ(resumed->ranks[0]->rng(), straight->ranks[0]->rng());

  auto no_rng = Run(3, {false, true}, true);
  ASSERT_TRUE(no_rng) << status_.ToString();
  EXPECT_FALSE(Differing(Global(*straight), Global(*no_rng)).empty());
  EXPECT_EQ(no_rng->ranks[0]->rng().offset, 3u);

  auto no_iter = Run(3, {true, false}, true);
  ASSERT_TRUE(no_iter) << status_.ToString();
  EXPECT_FALSE(Differing(Global(*straight), Global(*no_iter)).empty());
  EXPECT_EQ(no_iter->ranks[0]->consumed_samples(), 3 * 8);  // samples [0, 24) seen twice
}

TEST_F(ResumeTest, MissingStateAndOtherArgsAreRefused) {
  auto first = Run(2, {false, false}, false);
  ASSERT_TRUE(Save(*first, {false, false}).ok());
  EXPECT_FALSE(Run(1, ResumeParts{}, true));
  EXPECT_EQ(status_.code(), Code::kFailedPrecondition);
  EXPECT_NE(status_.message().find("object 'resume.data_iterator'"), std::string::npos) << status_.ToString();
  EXPECT_NE(status_.message().find("object 'resume.rng'"), std::string::npos) << status_.ToString();
  EXPECT_NE(status_.message().find("--no-rng-state"), std::string::npos) << status_.ToString();
  EXPECT_TRUE(Run(1, {false, false}, true)) << status_.ToString();

  TrainConfig other = Config();
  other.seed = 7;
  EXPECT_FALSE(Run(1, {false, false}, true, other));
  EXPECT_NE(status_.message().find("seed: checkpoint 1234, this job 7"), std::string::npos) << status_.ToString();
}

TEST_F(ResumeTest, ModelParamsMustBeTheRoundingOfTheMainParams) {
  auto job = Run(2, ResumeParts{}, false);
  ShardedStateDict sd = job->ranks[0]->SaveDict(ResumeParts{});
  sd.tensors()[5].data[0] ^= std::byte{1};  // a model (bf16) tensor comes first in the dict
  SaveOptions o;
  o.root = root_;
  o.iteration = 2;
  ASSERT_TRUE(SaveCheckpoint(sd, o).ok());
  EXPECT_FALSE(Run(1, ResumeParts{}, true));
  EXPECT_EQ(status_.code(), Code::kCorruption);
  EXPECT_NE(status_.message().find("is not the rounding of its fp32 main param"), std::string::npos) << status_.ToString();
}

TEST_F(ResumeTest, NonFiniteStateIsNotCommitted) {
  TrainConfig cfg = Config();
  cfg.inject_nan_step = 2;
  auto job = std::make_unique<Job>("tp=1", cfg);
  job->Init();
  job->Train(1);
  ASSERT_TRUE(Save(*job, ResumeParts{}).ok());
  job->Train(1);
  Status st = Save(*job, ResumeParts{});
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find(std::string("tensor '") + kNanTensor + "' holds NaN at local flat index 100"),
            std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("rank 0"), std::string::npos) << st.ToString();
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root_), 1);
  EXPECT_TRUE(Save(*job, ResumeParts{}, NonFinitePolicy::kWarn).ok());
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root_), 2);
}

// CommCollectives waits the job's timeout, not a fixed 10 minutes: a peer that
// comes 1.5 s late is a Timeout after 0.3 s.
TEST(CommCollectivesTest, ReductionsUseTheJobsTimeout) {
  auto dp = MakeThreadComms(2);
  Status st0, st1;
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    CommCollectives c(nullptr, dp[1].get(), Millis(300));
    std::vector<float> v{2.0f};
    st1 = c.SumOverDp(std::span<float>(v));
  });
  const auto t0 = std::chrono::steady_clock::now();
  CommCollectives c(nullptr, dp[0].get(), Millis(300));
  std::vector<float> v{1.0f};
  st0 = c.SumOverDp(std::span<float>(v));
  const double waited = Since(t0);
  late.join();
  EXPECT_EQ(st0.code(), Code::kTimeout) << st0.ToString();
  EXPECT_LT(waited, 1.4);
  EXPECT_FALSE(st1.ok());
}

}  // namespace
}  // namespace ckpt::workload
