// GPT sharded-state layouts: tiling, key names, Megatron-Core layout rules,
// expected values, and a cross-layout round trip through an in-test global store.
#include "reshard/megatron_gpt.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "ckpt/workload/expected_values.h"
#include "ckpt/workload/gpt_local_state.h"
#include "harness/negative_controls.h"

namespace ckpt::reshard {
namespace {

using namespace ckpt::workload;  // owned test state and expected values
using testing::NaiveFc1Shards;

struct Layout {
  std::string spec;  // ParallelConfig
  bool tied = false, stacked = false, gqa = true, swiglu = true, bias = false;
  int first = -1, last = -1;
};

std::string Name(const Layout& l) {
  return l.spec + (l.tied ? " tied" : "") + (l.stacked ? " stacked" : "") + (l.gqa ? "" : " mha") +
         (l.swiglu ? "" : " gelu") + (l.bias ? " bias" : "") + " first=" + std::to_string(l.first) +
         " last=" + std::to_string(l.last);
}

GptConfig Tiny(const Layout& l) {
  GptConfig c = *GptPreset("tiny");
  c.tied_embeddings = l.tied;
  c.stack_layers = l.stacked;
  c.swiglu = l.swiglu;
  c.add_bias_linear = l.bias;
  c.first_stage_layers = l.first;
  c.last_stage_layers = l.last;
  if (!l.gqa) c.num_query_groups = 0;
  return c;
}

// One rank's shards, by value (a range-for over *Result would dangle).
std::vector<GptShard> Shards(const GptConfig& cfg, const ParallelConfig& pc, int rank) {
  auto shards = GptShards(cfg, pc, *CoordsOf(pc, rank));
  EXPECT_TRUE(shards.ok()) << shards.status().ToString();
  return shards.ok() ? std::move(shards).value() : std::vector<GptShard>{};
}

// All shards of all ranks, rank-major.
std::vector<std::vector<GptShard>> AllRanks(const GptConfig& cfg, const ParallelConfig& pc) {
  std::vector<std::vector<GptShard>> out;
  for (int r = 0; r < pc.world_size(); ++r) out.push_back(Shards(cfg, pc, r));
  return out;
}

// Calls f(pos, multi-index in global coordinates) for each element of the shard.
template <typename F>
void ForEachElement(const ShardedTensor& t, F f) {
  const int64_t n = NumElements(t.local_shape);
  const int64_t b = t.flat_range ? t.flat_range->begin : 0,
                e = t.flat_range ? t.flat_range->end : n;
  Shape idx(t.local_shape.size());
  for (int64_t p = b; p < e; ++p) {
    int64_t rest = p;
    for (size_t d = idx.size(); d-- > 0;) {
      idx[d] = t.global_offset[d] + rest % t.local_shape[d];
      rest /= t.local_shape[d];
    }
    f(p - b, idx);
  }
}

// Row-major index of `idx` in `shape`, or -1 if outside it.
int64_t Ravel(const Shape& idx, const Shape& shape) {
  int64_t g = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (idx[d] >= shape[d]) return -1;
    g = g * shape[d] + idx[d];
  }
  return g;
}

// Per key: every element of the global tensor covered by exactly one main replica.
void ExpectExactTiling(const std::vector<std::vector<GptShard>>& ranks, const std::string& what) {
  std::map<std::string, std::pair<Shape, std::vector<int>>> count;
  for (const auto& shards : ranks)
    for (const GptShard& g : shards) {
      auto& [shape, c] = count[g.tensor.key];
      if (c.empty()) {
        shape = g.tensor.global_shape;
        c.assign(size_t(NumElements(shape)), 0);
      }
      ASSERT_EQ(shape, g.tensor.global_shape) << what << " " << g.tensor.key;
      if (!g.tensor.is_main_replica()) continue;
      ForEachElement(g.tensor, [&](int64_t, const Shape& idx) { ++c[size_t(Ravel(idx, shape))]; });
    }
  for (const auto& [key, sc] : count) {
    int64_t zero = 0, many = 0;
    for (int n : sc.second) zero += n == 0, many += n > 1;
    EXPECT_EQ(zero, 0) << what << ": gap in " << key;
    EXPECT_EQ(many, 0) << what << ": overlap in " << key;
  }
}

std::set<std::string> ExpectedKeys(const GptConfig& c) {
  std::set<std::string> keys = {"embedding.word_embeddings.weight",
                                "decoder.final_layernorm.weight"};
  if (!c.tied_embeddings) keys.insert("output_layer.weight");
  // The norms under MCore's keys (tests/unit/reshard/mcore_keys_test.cc derives them).
  std::vector<std::string> names = {"self_attention.linear_qkv.layer_norm_weight",
                                    "self_attention.linear_qkv.weight",
                                    "self_attention.linear_proj.weight",
                                    "mlp.linear_fc1.layer_norm_weight",
                                    "mlp.linear_fc1.weight",
                                    "mlp.linear_fc2.weight"};
  if (c.add_bias_linear)
    for (const char* b : {"self_attention.linear_qkv.bias", "self_attention.linear_proj.bias",
                          "mlp.linear_fc1.bias", "mlp.linear_fc2.bias"})
      names.push_back(b);
  for (const auto& n : names) {
    if (c.stack_layers) keys.insert("decoder.layers." + n);
    for (int l = 0; !c.stack_layers && l < c.num_layers; ++l)
      keys.insert("decoder.layers." + std::to_string(l) + "." + n);
  }
  return keys;
}

const std::vector<Layout>& Layouts() {
  static const std::vector<Layout> kLayouts = {
      {"tp=1"},
      {"tp=2"},
      {"tp=4"},
      {"tp=8"},
      {"tp=2", true},
      {"tp=4", false, true},
      {"tp=2,dp=2", true, true},
      {"tp=2,pp=2"},
      {"tp=2,pp=2", true},
      {"pp=4", true, true},
      {"tp=4,pp=2,dp=2,cp=2"},
      {"tp=2,pp=4", false, false, true, true, false, 1, 1},
      {"pp=3", true, false, true, true, false, 2, -1},
      {"pp=2", false, false, true, true, false, -1, 2},
      {"tp=2,pp=2,vpp=2"},
      {"pp=2,vpp=2", true, true},
      {"pp=4,vpp=2,tp=2"},
      {"tp=8", false, false, false},
      {"tp=2", false, false, true, false},
      {"tp=4,pp=2", false, true, true, true, true},
      {"tp=2,pp=2,vpp=2,dp=2", true, false, true, true, true},
  };
  return kLayouts;
}

TEST(GptLayoutTest, MainReplicasTileEveryTensorExactlyOnce) {
  for (const Layout& l : Layouts()) {
    GptConfig cfg = Tiny(l);
    ParallelConfig pc = *ParallelConfig::Parse(l.spec);
    auto ranks = AllRanks(cfg, pc);
    ExpectExactTiling(ranks, Name(l));
    std::set<std::string> keys;
    for (const auto& shards : ranks) {
      for (const GptShard& g : shards) {
        keys.insert(g.tensor.key);
        EXPECT_TRUE(g.tensor.Validate().ok()) << g.tensor.DebugString();
        EXPECT_EQ(g.tensor.dtype, DType::kBFloat16);
      }
      EXPECT_TRUE(GptLocalState::Create(shards).ok()) << Name(l);
    }
    EXPECT_EQ(keys, ExpectedKeys(cfg)) << Name(l);
  }
}

TEST(GptLayoutTest, GlobalShapesAreTpIndependentExceptVocab) {
  GptConfig cfg = *GptPreset("tiny");
  std::map<std::string, Shape> ref;
  for (int tp : {1, 2, 4, 8}) {
    ParallelConfig pc{tp, 1, 1, 1, 1, 1};
    std::map<std::string, Shape> shapes;
    for (const GptShard& g : Shards(cfg, pc, 0)) shapes[g.tensor.key] = g.tensor.global_shape;
    EXPECT_EQ(shapes["embedding.word_embeddings.weight"], (Shape{PaddedVocabSize(cfg, tp), 64}));
    EXPECT_EQ(shapes["output_layer.weight"], (Shape{PaddedVocabSize(cfg, tp), 64}));
    // ng * (np/ng + 2) * hn = 8 * (2 + 2) * 4 rows whatever the TP.
    EXPECT_EQ(shapes["decoder.layers.3.self_attention.linear_qkv.weight"], (Shape{128, 64}));
    EXPECT_EQ(shapes["decoder.layers.3.mlp.linear_fc1.weight"], (Shape{256, 64}));
    EXPECT_EQ(shapes["decoder.layers.3.mlp.linear_fc2.weight"], (Shape{64, 128}));
    shapes.erase("embedding.word_embeddings.weight");
    shapes.erase("output_layer.weight");
    if (ref.empty()) ref = shapes;
    EXPECT_EQ(shapes, ref) << "tp=" << tp;
  }
}

TEST(GptLayoutTest, VocabPaddingFollowsMegatron) {
  GptConfig gpt2;
  gpt2.vocab_size = 50257;
  EXPECT_EQ(PaddedVocabSize(gpt2, 1), 50304);
  EXPECT_EQ(PaddedVocabSize(gpt2, 4), 50688);
  EXPECT_EQ(PaddedVocabSize(gpt2, 8), 51200);
  GptConfig tiny = *GptPreset("tiny");
  EXPECT_EQ(PaddedVocabSize(tiny, 1), 1152);
  EXPECT_EQ(PaddedVocabSize(tiny, 2), 1280);
  EXPECT_EQ(PaddedVocabSize(tiny, 4), 1536);
  EXPECT_EQ(PaddedVocabSize(tiny, 8), 2048);
}

TEST(GptLayoutTest, SwigluFc1IsTwoShardsWAtRAndVAtTpPlusR) {
  GptConfig cfg = *GptPreset("tiny");  // ffn 128
  ParallelConfig pc{4, 1, 1, 1, 1, 1};
  for (int r = 0; r < 4; ++r) {
    const std::vector<GptShard> shards = Shards(cfg, pc, r);
    std::vector<const GptShard*> fc1;
    for (const GptShard& g : shards)
      if (g.tensor.key == "decoder.layers.0.mlp.linear_fc1.weight") fc1.push_back(&g);
    ASSERT_EQ(fc1.size(), 2u);
    EXPECT_EQ(fc1[0]->tensor.global_offset, (Shape{r * 32, 0}));        // W_r: block r of 8
    EXPECT_EQ(fc1[1]->tensor.global_offset, (Shape{(4 + r) * 32, 0}));  // V_r: block tp + r
    EXPECT_EQ(fc1[0]->tensor.local_shape, (Shape{32, 64}));
    EXPECT_EQ(fc1[0]->param, fc1[1]->param);
    EXPECT_EQ(fc1[0]->param_shape, (Shape{64, 64}));
    EXPECT_EQ(fc1[0]->param_offset, 0);
    EXPECT_EQ(fc1[1]->param_offset, 32 * 64);
    EXPECT_EQ(fc1[0]->tensor.replica_id, (ReplicaId{0, 0, 0}));
  }
  auto naive = *NaiveFc1Shards(cfg, pc, *CoordsOf(pc, 3));
  auto it = std::find_if(naive.begin(), naive.end(), [](const GptShard& g) {
    return g.tensor.key == "decoder.layers.0.mlp.linear_fc1.weight";
  });
  ASSERT_NE(it, naive.end());
  EXPECT_EQ(it->tensor.global_offset, (Shape{3 * 64, 0}));
  EXPECT_EQ(it->tensor.local_shape, (Shape{64, 64}));
}

TEST(GptLayoutTest, ReplicaIdsAndTiedEmbeddings) {
  GptConfig cfg = *GptPreset("tiny");
  cfg.tied_embeddings = true;
  ParallelConfig pc = *ParallelConfig::Parse("tp=2,pp=2,dp=2");
  auto find = [](const std::vector<GptShard>& s, const std::string& param) -> const GptShard* {
    for (const GptShard& g : s)
      if (g.param == param) return &g;
    return nullptr;
  };
  auto last = Shards(cfg, pc, 7);  // tp 1, dp 1, pp 1
  const GptShard* out = find(last, "output_layer.weight");
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(out->tensor.key, "embedding.word_embeddings.weight");
  EXPECT_EQ(out->tensor.replica_id, (ReplicaId{1, 0, 1}));
  EXPECT_TRUE(out->tensor.allow_shape_mismatch);
  EXPECT_EQ(find(last, "decoder.layers.0.input_layernorm.weight")->tensor.replica_id,
            (ReplicaId{0, 1, 1}));
  EXPECT_EQ(find(last, "decoder.layers.0.mlp.linear_fc2.weight")->tensor.replica_id,
            (ReplicaId{0, 0, 1}));
  EXPECT_EQ(find(last, "decoder.layers.0.input_layernorm.weight")->tensor.key,
            "decoder.layers.4.self_attention.linear_qkv.layer_norm_weight");  // stage offset 4 + local 0
  ParallelConfig pp1 = *ParallelConfig::Parse("tp=2");
  int emb = 0;
  for (const GptShard& g : Shards(cfg, pp1, 1)) {
    emb += g.tensor.key == "embedding.word_embeddings.weight";
    EXPECT_NE(g.tensor.key, "output_layer.weight");
  }
  EXPECT_EQ(emb, 1);
}

TEST(GptLayoutTest, StackedLayersPrependTheLayerAxis) {
  GptConfig cfg = *GptPreset("tiny");
  cfg.stack_layers = true;
  ParallelConfig pc = *ParallelConfig::Parse("tp=2,pp=2,vpp=2");
  for (const GptShard& g : Shards(cfg, pc, 3)) {  // tp 1, pp 1
    if (g.param != "model1.decoder.layers.1.self_attention.linear_proj.weight") continue;
    EXPECT_EQ(g.tensor.key, "decoder.layers.self_attention.linear_proj.weight");
    EXPECT_EQ(g.tensor.global_shape, (Shape{8, 64, 64}));
    EXPECT_EQ(g.tensor.global_offset, (Shape{7, 0, 32}));  // chunk 1 of stage 1: layers 6, 7
    EXPECT_EQ(g.tensor.local_shape, (Shape{1, 64, 32}));
    return;
  }
  FAIL() << "stacked linear_proj not found";
}

// MCore's local-spec linears (ColumnParallelLinear / RowParallelLinear)
// register "<module>._extra_state": one object per linear layer, on the layer
// grid when stacked ((1,) otherwise), replica (0, tp, dp); none for norms and
// the output layer (GPTModel drops it). Off by default.
TEST(GptLayoutTest, ExtraStateObjectsOfTheLinearLayers) {
  GptConfig cfg = *GptPreset("tiny");
  ParallelConfig pc = *ParallelConfig::Parse("tp=2,pp=2,dp=2");
  for (const GptShard& g : Shards(cfg, pc, 0)) EXPECT_FALSE(g.extra_state) << g.tensor.key;
  cfg.extra_state = true;
  for (bool stacked : {false, true}) {
    cfg.stack_layers = stacked;
    std::map<std::string, const GptShard*> with;
    const auto shards = Shards(cfg, pc, 7);  // tp 1, dp 1, pp 1: layers 4..7 and the output
    for (const GptShard& g : shards)
      if (g.extra_state) with[g.extra_state->key + "@" + std::to_string(g.extra_state->cell())] = &g;
    EXPECT_EQ(with.size(), 4u * 4u) << stacked;  // qkv, proj, fc1, fc2 of 4 layers
    const std::string key = stacked ? "decoder.layers.mlp.linear_fc1._extra_state"
                                    : "decoder.layers.5.mlp.linear_fc1._extra_state";
    const auto it = with.find(key + "@" + (stacked ? "5" : "0"));
    ASSERT_NE(it, with.end()) << key;
    const ShardedObject& o = *it->second->extra_state;
    EXPECT_EQ(o.global_shape, stacked ? Shape{8} : Shape{1});
    EXPECT_EQ(o.replica_id, (ReplicaId{0, 1, 1}));
    EXPECT_EQ(it->second->tensor.global_offset[stacked ? 1 : 0], 64);  // on W_1 (ffn 128 / tp 2), the first fc1 shard
  }
}

TEST(GptLayoutTest, StageLayerSpansMatchMcoreOffsets) {
  GptConfig cfg = *GptPreset("tiny");  // 8 layers
  auto spans = [&](const char* spec, int p) {
    return *StageLayerSpans(cfg, *ParallelConfig::Parse(spec), p);
  };
  using S = std::vector<LayerSpan>;
  EXPECT_EQ(spans("pp=4", 2), (S{{4, 2}}));
  // MCore get_num_layers_to_build: 8 layers, 2 stages, 2 chunks: [0,1] [4,5] | [2,3] [6,7].
  EXPECT_EQ(spans("pp=2,vpp=2", 0), (S{{0, 2}, {4, 2}}));
  EXPECT_EQ(spans("pp=2,vpp=2", 1), (S{{2, 2}, {6, 2}}));
  EXPECT_EQ(spans("pp=2,vpp=4", 1), (S{{1, 1}, {3, 1}, {5, 1}, {7, 1}}));
  cfg.first_stage_layers = 1;
  cfg.last_stage_layers = 1;
  EXPECT_EQ(spans("pp=4", 0), (S{{0, 1}}));
  EXPECT_EQ(spans("pp=4", 1), (S{{1, 3}}));
  EXPECT_EQ(spans("pp=4", 3), (S{{7, 1}}));
  cfg.num_layers = 12;  // uneven + interleaved: stages 2 | 8 | 2, chunks 1 | 4 | 1
  cfg.first_stage_layers = 2;
  cfg.last_stage_layers = 2;
  EXPECT_EQ(spans("pp=3,vpp=2", 1), (S{{1, 4}, {7, 4}}));
  EXPECT_EQ(spans("pp=3,vpp=2", 2), (S{{5, 1}, {11, 1}}));
  EXPECT_EQ(spans("pp=4", 2), (S{{6, 4}}));  // middle 8 over 2 stages
  EXPECT_FALSE(StageLayerSpans(cfg, *ParallelConfig::Parse("pp=3,vpp=4"), 0).ok());  // 2 % 4
  EXPECT_FALSE(StageLayerSpans(cfg, *ParallelConfig::Parse("pp=3"), 3).ok());
}

TEST(GptLayoutTest, DemoPresetIsAboutOneGigabyteOfBf16) {
  GptConfig cfg = *GptPreset("demo");
  ParallelConfig pc;
  int64_t bytes = 0;
  for (const GptShard& g : Shards(cfg, pc, 0)) bytes += g.tensor.num_bytes();
  EXPECT_GT(bytes, 900'000'000);
  EXPECT_LT(bytes, 1'100'000'000);
}

TEST(GptLayoutTest, BadLayoutsAreClearErrors) {
  GptConfig cfg = *GptPreset("tiny");
  auto err = [&](const GptConfig& c, const char* spec) {
    ParallelConfig pc = *ParallelConfig::Parse(spec);
    auto s = GptShards(c, pc, *CoordsOf(pc, 0));
    EXPECT_FALSE(s.ok()) << spec;
    return s.ok() ? std::string() : s.status().message();
  };
  EXPECT_NE(err(cfg, "tp=16").find("num_query_groups"), std::string::npos);
  EXPECT_NE(err(cfg, "pp=3").find("do not split evenly"), std::string::npos);
  EXPECT_NE(err(cfg, "pp=4,vpp=4").find("not divisible by vpp=4"), std::string::npos);
  GptConfig c = cfg;
  c.first_stage_layers = 3;
  EXPECT_NE(err(c, "tp=1").find("need pp > 1"), std::string::npos);
  c.num_query_groups = 5;
  EXPECT_NE(err(c, "pp=2").find("multiple of num_query_groups"), std::string::npos);
  EXPECT_FALSE(GptPreset("huge").ok());
  EXPECT_FALSE(
      NaiveFc1Shards(Tiny({"tp=1", false, false, true, false}), ParallelConfig{}, RankCoords{})
          .ok());
}

// The M114 negative control: keys renumbered by the contiguous offset that
// ignores the VPP interleave; params (the data) untouched.
TEST(GptLayoutTest, ContiguousLayerKeysIgnoreTheInterleave) {
  const GptConfig cfg = *GptPreset("tiny");  // 8 layers
  const ParallelConfig pc = *ParallelConfig::Parse("pp=2,vpp=2");
  auto layers = [](const std::vector<GptShard>& shards) {
    std::vector<std::pair<std::string, std::string>> out;  // (key, param) of layer tensors
    for (const GptShard& g : shards)
      if (g.tensor.key.starts_with("decoder.layers.")) out.push_back({g.tensor.key, g.param});
    return out;
  };
  for (int p = 0; p < 2; ++p) {
    const RankCoords c = *CoordsOf(pc, p);
    const auto truth = *GptShards(cfg, pc, c);
    const auto naive = *testing::ContiguousLayerKeys(cfg, pc, c, truth);
    const auto t = layers(truth), n = layers(naive);
    ASSERT_EQ(t.size(), n.size());
    std::set<std::string> moved;
    for (size_t i = 0; i < t.size(); ++i) {
      EXPECT_EQ(t[i].second, n[i].second);  // same local parameter
      if (t[i].first != n[i].first) moved.insert(t[i].first.substr(0, t[i].first.find('.', 15)));
    }
    // Stage 0 holds layers 0,1 (chunk 0) and 4,5 (chunk 1): 4,5 are keyed 2,3.
    // Stage 1 holds 2,3 and 6,7: 2,3 are keyed 4,5.
    EXPECT_EQ(moved, p == 0 ? (std::set<std::string>{"decoder.layers.4", "decoder.layers.5"})
                            : (std::set<std::string>{"decoder.layers.2", "decoder.layers.3"}));
  }
  const ParallelConfig no_vpp = *ParallelConfig::Parse("pp=2");
  const auto truth = *GptShards(cfg, no_vpp, *CoordsOf(no_vpp, 1));
  EXPECT_EQ(layers(*testing::ContiguousLayerKeys(cfg, no_vpp, *CoordsOf(no_vpp, 1), truth)), layers(truth));
  GptConfig stacked = cfg;
  stacked.stack_layers = true;
  EXPECT_FALSE(testing::ContiguousLayerKeys(stacked, pc, *CoordsOf(pc, 0), *GptShards(stacked, pc, *CoordsOf(pc, 0))).ok());
}

}  // namespace
}  // namespace ckpt::reshard
