// MoE layouts: expert placement over EP, keys with a prepended expert axis,
// expert-DP replicas, tiling, and EP x TP round trips of values through the
// loader's read planner.
#include "reshard/megatron_moe.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>

#include "reshard/gpt_config_json.h"
#include "reshard/geometry/intersect.h"
#include "reshard/geometry/read_plan.h"
#include "ckpt/workload/gpt_local_state.h"

namespace ckpt::reshard {
namespace {

using namespace ckpt::workload;  // owned test state and expected values

GptConfig TinyMoe(int experts = 8) {
  GptConfig c = *GptPreset("tiny");
  c.num_experts = experts;
  c.moe_ffn_hidden = 32;
  return c;
}

std::vector<GptShard> Shards(const GptConfig& cfg, const char* spec, int rank) {
  ParallelConfig pc = *ParallelConfig::Parse(spec);
  auto s = GptShards(cfg, pc, *CoordsOf(pc, rank));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : std::vector<GptShard>{};
}

const GptShard* Find(const std::vector<GptShard>& shards, const std::string& param,
                     size_t nth = 0) {
  for (const GptShard& g : shards)
    if (g.param == param && nth-- == 0) return &g;
  return nullptr;
}

TEST(MoeLayoutTest, ExpertsAreSplitOverEpWithAPrependedExpertAxis) {
  // tp=2, dp=4, ep=4: rank 7 is tp 1, dp 3 -> ep 3, expert-dp 0; local experts 6, 7.
  auto shards = Shards(TinyMoe(), "tp=2,dp=4,ep=4", 7);
  const GptShard* w = Find(shards, "decoder.layers.2.mlp.experts.local_experts.1.linear_fc1.weight");
  const GptShard* v = Find(shards, "decoder.layers.2.mlp.experts.local_experts.1.linear_fc1.weight", 1);
  ASSERT_TRUE(w && v);
  EXPECT_EQ(w->tensor.key, "decoder.layers.2.mlp.experts.experts.linear_fc1.weight");  // MCore's name
  EXPECT_EQ(w->tensor.global_shape, (Shape{8, 64, 64}));  // [E, 2*ffn, h]
  EXPECT_EQ(w->tensor.global_offset, (Shape{7, 16, 0}));  // expert 3*2+1, W block tp=1
  EXPECT_EQ(v->tensor.global_offset, (Shape{7, 48, 0}));  // V block tp + 1
  EXPECT_EQ(w->tensor.local_shape, (Shape{1, 16, 64}));
  EXPECT_EQ(v->param_offset, 16 * 64);
  EXPECT_EQ(w->tensor.replica_id, (ReplicaId{0, 0, 0}));
  const GptShard* fc2 = Find(shards, "decoder.layers.2.mlp.experts.local_experts.0.linear_fc2.weight");
  ASSERT_TRUE(fc2);
  EXPECT_EQ(fc2->tensor.global_offset, (Shape{6, 0, 16}));  // row-parallel inside the expert
  EXPECT_EQ(Find(shards, "decoder.layers.2.mlp.experts.local_experts.2.linear_fc1.weight"), nullptr);
  EXPECT_EQ(Find(shards, "decoder.layers.2.mlp.linear_fc1.weight"), nullptr);  // no dense MLP
  const GptShard* router = Find(shards, "decoder.layers.2.mlp.router.weight");
  ASSERT_TRUE(router);
  EXPECT_EQ(router->tensor.global_shape, (Shape{8, 64}));
  EXPECT_EQ(router->tensor.replica_id, (ReplicaId{0, 1, 3}));  // TP-replicated, dense DP
}

TEST(MoeLayoutTest, ExpertReplicasRunOverExpertDp) {
  // dp=4, ep=2: dp ranks 0, 2 hold experts 0..3 (expert-dp 0, 1); 1, 3 hold 4..7.
  for (int r = 0; r < 4; ++r) {
    auto shards = Shards(TinyMoe(), "dp=4,ep=2", r);
    const GptShard* fc2 = Find(shards, "decoder.layers.0.mlp.experts.local_experts.0.linear_fc2.weight");
    ASSERT_TRUE(fc2);
    EXPECT_EQ(fc2->tensor.global_offset[0], (r % 2) * 4) << r;
    EXPECT_EQ(fc2->tensor.replica_id, (ReplicaId{0, 0, r / 2})) << r;
  }
}

TEST(MoeLayoutTest, StackedLayersPutTheLayerAxisBeforeTheExpertAxis) {
  GptConfig cfg = TinyMoe();
  cfg.stack_layers = true;
  auto shards = Shards(cfg, "pp=2,dp=2,ep=2", 3);  // pp 1, ep 1
  const GptShard* fc2 = Find(shards, "decoder.layers.1.mlp.experts.local_experts.3.linear_fc2.weight");
  ASSERT_TRUE(fc2);
  EXPECT_EQ(fc2->tensor.key, "decoder.layers.mlp.experts.experts.linear_fc2.weight");
  EXPECT_EQ(fc2->tensor.global_shape, (Shape{8, 8, 64, 32}));
  EXPECT_EQ(fc2->tensor.global_offset, (Shape{5, 7, 0, 0}));  // layer 4+1, expert 4+3
}

// MCore (SequentialMLP/TEGroupedMLP under MoELayer's "experts") keys experts
// "...mlp.experts.experts.<name>"; checkpoints written before recorded no key
// style and keep reading with their "...mlp.experts.<name>".
TEST(MoeLayoutTest, McoreExpertKeysByDefaultLegacyKeysForOldMetadata) {
  GptConfig cfg = TinyMoe();
  nlohmann::json j = GptConfigToJson(cfg);
  EXPECT_EQ(j["expert_keys"], "mcore");
  j.erase("expert_keys");  // metadata of a checkpoint written before the option existed
  auto old = GptConfigFromJson(j);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->expert_keys, GptConfig::ExpertKeys::kLegacy);
  auto shards = Shards(*old, "dp=2,ep=2", 1);
  const GptShard* fc1 = Find(shards, "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight");
  ASSERT_TRUE(fc1);
  EXPECT_EQ(fc1->tensor.key, "decoder.layers.0.mlp.experts.linear_fc1.weight");
  j["expert_keys"] = "other";
  EXPECT_FALSE(GptConfigFromJson(j).ok());
}

// With extra_state, each expert linear carries MCore's _extra_state object on
// the [layers,] experts grid, replicated over TP and expert-DP.
TEST(MoeLayoutTest, ExpertExtraStateObjectsSitOnTheExpertGrid) {
  GptConfig cfg = TinyMoe();
  cfg.extra_state = true;
  cfg.stack_layers = true;
  auto shards = Shards(cfg, "tp=2,dp=4,ep=4", 7);  // tp 1, ep 3, expert-dp 0: experts 6, 7
  const GptShard* fc1 = Find(shards, "decoder.layers.2.mlp.experts.local_experts.1.linear_fc1.weight");
  const GptShard* v = Find(shards, "decoder.layers.2.mlp.experts.local_experts.1.linear_fc1.weight", 1);
  ASSERT_TRUE(fc1 && v && fc1->extra_state);
  EXPECT_FALSE(v->extra_state);  // one object per module, on its first shard
  EXPECT_EQ(fc1->extra_state->key, "decoder.layers.mlp.experts.experts.linear_fc1._extra_state");
  EXPECT_EQ(fc1->extra_state->global_shape, (Shape{8, 8}));
  EXPECT_EQ(fc1->extra_state->global_offset, (Shape{2, 7}));
  EXPECT_EQ(fc1->extra_state->replica_id, (ReplicaId{0, 1, 0}));
  const GptShard* router = Find(shards, "decoder.layers.2.mlp.router.weight");
  ASSERT_TRUE(router);
  EXPECT_FALSE(router->extra_state);  // TopKRouter has no extra state
}

// Every element of every tensor has exactly one main replica, whatever the split.
TEST(MoeLayoutTest, MainReplicasTileEveryTensorExactlyOnce) {
  for (const char* spec : {"tp=2,dp=4,ep=4", "dp=2,ep=2", "dp=8,ep=8", "tp=2,dp=2,cp=2,ep=4",
                           "pp=2,dp=4,ep=2"}) {
    GptConfig cfg = TinyMoe();
    cfg.add_bias_linear = std::string(spec) == "dp=2,ep=2";
    ParallelConfig pc = *ParallelConfig::Parse(spec);
    std::map<std::string, std::vector<ShardedTensor>> by_key;
    for (int r = 0; r < pc.world_size(); ++r)
      for (const GptShard& g : Shards(cfg, spec, r))
        if (g.tensor.is_main_replica()) by_key[g.tensor.key].push_back(g.tensor);
    EXPECT_GT(by_key.count("decoder.layers.7.mlp.experts.experts.linear_fc1.weight"), 0u);
    for (const auto& [key, ts] : by_key)
      EXPECT_TRUE(CheckCoverage(key, ts[0].global_shape, ts).ok()) << spec << " " << key;
  }
}

struct Job {
  GptConfig cfg;
  std::vector<std::unique_ptr<GptLocalState>> ranks;
  std::vector<ShardedStateDict> dicts;
};

Job MakeJob(const GptConfig& cfg, const char* spec, bool fill) {
  Job j{cfg, {}, {}};
  ParallelConfig pc = *ParallelConfig::Parse(spec);
  for (int r = 0; r < pc.world_size(); ++r) {
    auto s = GptLocalState::Create(Shards(cfg, spec, r));
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    j.ranks.push_back(std::make_unique<GptLocalState>(std::move(s).value()));
    if (fill) {
      EXPECT_TRUE(j.ranks.back()->FillExpected(cfg.vocab_size).ok());
    }
    j.dicts.push_back(j.ranks.back()->StateDict());
  }
  return j;
}

// The loader's plan and copies, in memory, from the main replicas of `src`.
void Reshard(const Job& src, Job& dst) {
  std::vector<SavedShard> saved;
  std::vector<std::span<const std::byte>> data;
  for (const auto& sd : src.dicts)
    for (const auto& t : sd.tensors())
      if (t.meta.is_main_replica()) {
        saved.push_back({t.meta, 0, 0, {}});
        data.push_back(t.data);
      }
  for (auto& sd : dst.dicts) {
    std::vector<ShardedTensor> req;
    for (const auto& t : sd.tensors()) req.push_back(t.meta);
    auto plan = PlanReads(saved, req);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    for (const RequestPlan& rp : plan->requests) {
      auto& buf = sd.tensors()[size_t(rp.request)].data;
      const size_t es = DTypeSize(sd.tensors()[size_t(rp.request)].meta.dtype);
      if (rp.zero_fill_elems > 0) std::memset(buf.data(), 0, buf.size());
      for (const ChunkRead& cr : rp.reads)
        for (const CopyRun& run : cr.runs)
          std::memcpy(buf.data() + run.dst * es, data[size_t(cr.saved_shard)].data() + run.src * es,
                      size_t(run.len) * es);
    }
  }
}

int64_t Mismatches(const Job& j) {
  int64_t bad = 0;
  for (const auto& r : j.ranks) bad += *r->CountMismatches(j.cfg.vocab_size, nullptr);
  return bad;
}

TEST(MoeLayoutTest, EpAndTpChangesReshardExpertValues) {
  for (auto [from, to] : std::vector<std::pair<const char*, const char*>>{
           {"tp=2,dp=4,ep=4", "dp=2,ep=2"}, {"dp=2,ep=2", "dp=8,ep=8"}, {"dp=4,ep=4", "tp=4"}}) {
    Job src = MakeJob(TinyMoe(), from, true);
    ASSERT_EQ(Mismatches(src), 0);
    Job dst = MakeJob(TinyMoe(), to, false);
    ASSERT_GT(Mismatches(dst), 0);
    Reshard(src, dst);
    EXPECT_EQ(Mismatches(dst), 0) << from << " -> " << to;
  }
}

TEST(MoeLayoutTest, BadMoeLayoutsAndConfigJson) {
  ParallelConfig pc = *ParallelConfig::Parse("dp=4,ep=4");
  auto s = GptShards(TinyMoe(6), pc, RankCoords{});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("num_experts=6 is not divisible by ep=4"), std::string::npos);
  GptConfig odd = TinyMoe();
  odd.moe_ffn_hidden = 33;
  EXPECT_FALSE(GptShards(odd, *ParallelConfig::Parse("tp=2"), RankCoords{}).ok());
  nlohmann::json j;
  MoeConfigToJson(TinyMoe(), &j);
  GptConfig back = *GptPreset("tiny");
  ASSERT_TRUE(MoeConfigFromJson(j, &back).ok());
  EXPECT_EQ(back.num_experts, 8);
  EXPECT_EQ(back.moe_ffn_hidden, 32);
  EXPECT_FALSE(MoeConfigFromJson({{"num_experts", -1}}, &back).ok());
  EXPECT_TRUE(IsExpertParam("model1.decoder.layers.0.mlp.experts.local_experts.2.linear_fc2.weight"));
  EXPECT_FALSE(IsExpertParam("decoder.layers.0.mlp.router.weight"));
}

}  // namespace
}  // namespace ckpt::reshard
