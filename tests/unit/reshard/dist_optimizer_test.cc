// Distributed-optimizer layout (MCore buffer/bucket arithmetic, DP ownership),
// model-space fragments (tiling, SwiGLU split, cross-layout round trips through
// the loader's read planner) and bucket-space layout checks.
#include "reshard/dist_optimizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>
#include <memory>
#include <numeric>

#include <thread>

#include "ckpt/base/comm.h"
#include "ckpt/protocol/checkpoint.h"
#include "reshard/geometry/intersect.h"
#include "harness/test_util.h"
#include "reshard/geometry/read_plan.h"
#include "ckpt/workload/dist_optimizer_state.h"
#include "ckpt/workload/expected_values.h"

namespace ckpt::reshard {
namespace {

using namespace ckpt::workload;  // owned test state and expected values

using Ranges = std::vector<OwnedRange>;

bool Same(const OwnedRange& a, const OwnedRange& b) {
  return a.param == b.param && a.bucket == b.bucket && a.param_begin == b.param_begin &&
         a.param_end == b.param_end && a.local_pos == b.local_pos;
}

void ExpectRanges(const Ranges& got, const Ranges& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(Same(got[i], want[i])) << "range " << i << ": param " << got[i].param << " ["
                                       << got[i].param_begin << ", " << got[i].param_end
                                       << ") at " << got[i].local_pos;
}

// Hand-computed from param_and_grad_buffer.py: reverse order, starts padded to
// 64, bucket ends padded to lcm(dp, 128), dp equal slices per bucket.
TEST(DistOptLayoutTest, OneBucketMatchesMcoreArithmetic) {
  auto L = *LayoutBuffer({{"a", 100}, {"b", 30}, {"c", 200}}, 2, 0);
  ASSERT_EQ(L.params.size(), 3u);
  EXPECT_EQ(L.params[0].name, "c");  // buffer order is the model order reversed
  EXPECT_EQ(L.starts, (std::vector<int64_t>{0, 256, 320}));
  ASSERT_EQ(L.buckets.size(), 1u);
  EXPECT_EQ(L.buckets[0].end, 512);  // 420 padded to lcm(2, 128)
  EXPECT_EQ(L.buckets[0].numel_unpadded, 420);
  ExpectRanges(OwnedRanges(L, 0), {{0, 0, 0, 200, 0}});
  ExpectRanges(OwnedRanges(L, 1), {{1, 0, 0, 30, 0}, {2, 0, 0, 100, 64}});
}

TEST(DistOptLayoutTest, BucketsCloseOnceFull) {
  auto L = *LayoutBuffer({{"a", 100}, {"b", 30}, {"c", 200}}, 2, 250);
  ASSERT_EQ(L.buckets.size(), 2u);
  EXPECT_EQ(L.buckets[0].start, 0);
  EXPECT_EQ(L.buckets[0].end, 384);  // closes after b (286 >= 250), padded to 128
  EXPECT_EQ(L.buckets[0].numel_unpadded, 286);
  EXPECT_EQ(L.buckets[1].start, 384);
  EXPECT_EQ(L.buckets[1].end, 512);
  EXPECT_EQ(L.starts, (std::vector<int64_t>{0, 256, 384}));
  ExpectRanges(OwnedRanges(L, 0), {{0, 0, 0, 192, 0}, {2, 1, 0, 64, 192}});
  ExpectRanges(OwnedRanges(L, 1), {{0, 0, 192, 200, 0}, {1, 0, 0, 30, 64}, {2, 1, 64, 100, 192}});
}

TEST(DistOptLayoutTest, SharedEmbeddingGetsItsOwnBucketAndLcmPadding) {
  auto L = *LayoutBuffer({{"emb", 300, true}, {"x", 10}}, 3, 0);
  ASSERT_EQ(L.buckets.size(), 2u);
  EXPECT_EQ(L.buckets[0].end, 384);  // x, then the 64-aligned start 64 padded to lcm(3,128)
  EXPECT_EQ(L.buckets[0].numel_unpadded, 64);
  EXPECT_EQ(L.starts[1], 384);  // the embedding starts its bucket
  EXPECT_EQ(L.buckets[1].end, 768);
  EXPECT_EQ(L.SliceElems(1), 128);
  // Same relative ownership as on the last stage, where the copy comes first.
  auto last = *LayoutBuffer({{"y", 10}, {"out", 300, true}}, 3, 0);
  EXPECT_EQ(last.starts[0], 0);
  ExpectRanges(OwnedRanges(last, 2), {{0, 0, 256, 300, 0}});
  ExpectRanges(OwnedRanges(L, 2), {{1, 1, 256, 300, 128}});
}

// For any sizes: params aligned, buckets divisible, every param owned exactly once.
TEST(DistOptLayoutTest, OwnershipPartitionsEveryParam) {
  std::vector<BufferParam> params;
  for (int i = 0; i < 23; ++i) params.push_back({"p" + std::to_string(i), 1 + (i * 7919) % 1000});
  for (int dp : {1, 2, 3, 4, 8, 12})
    for (int64_t bucket : {0, 500, 3000}) {
      auto L = *LayoutBuffer(params, dp, bucket);
      for (int64_t s : L.starts) EXPECT_EQ(s % 64, 0);
      for (const Bucket& b : L.buckets) EXPECT_EQ((b.end - b.start) % std::lcm(dp, 128), 0);
      std::vector<std::vector<char>> hit(params.size());
      for (size_t i = 0; i < params.size(); ++i) hit[i].assign(size_t(L.params[i].numel), 0);
      for (int r = 0; r < dp; ++r)
        for (const OwnedRange& o : OwnedRanges(L, r))
          for (int64_t k = o.param_begin; k < o.param_end; ++k) hit[size_t(o.param)][size_t(k)]++;
      for (const auto& h : hit)
        for (char c : h) ASSERT_EQ(c, 1) << "dp " << dp << " bucket " << bucket;
    }
}

GptConfig Tiny() { return *GptPreset("tiny"); }

std::vector<RankBuffer> Buffers(const GptConfig& cfg, const char* spec, int rank,
                                int64_t bucket = 0) {
  ParallelConfig pc = *ParallelConfig::Parse(spec);
  RankCoords c = *CoordsOf(pc, rank);
  auto shards = GptShards(cfg, pc, c);
  EXPECT_TRUE(shards.ok()) << shards.status().ToString();
  auto b = GptRankBuffers(cfg, pc, c, *shards, {bucket});
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return b.ok() ? *b : std::vector<RankBuffer>{};
}

int IndexOf(const BufferLayout& L, const std::string& name) {
  for (size_t i = 0; i < L.params.size(); ++i)
    if (L.params[i].name == name) return int(i);
  return -1;
}

TEST(DistOptLayoutTest, GptBuffersFollowMcoreRegistrationAndBucketRules) {
  auto b = Buffers(Tiny(), "dp=2", 0);
  ASSERT_EQ(b.size(), 1u);
  const BufferLayout& L = b[0].layout;
  EXPECT_EQ(L.params.front().name, "output_layer.weight");  // reversed
  EXPECT_EQ(L.params.back().name, "embedding.word_embeddings.weight");
  // named_parameters: linear_proj (Attention.__init__) before linear_qkv; reversed here.
  EXPECT_LT(IndexOf(L, "decoder.layers.0.self_attention.linear_qkv.weight"),
            IndexOf(L, "decoder.layers.0.self_attention.linear_proj.weight"));
  EXPECT_EQ(b[0].dp_domain, "dp_group_idx_0");
  EXPECT_GT(Buffers(Tiny(), "pp=2,dp=2", 0, 20000)[0].layout.buckets.size(), 1u);
  EXPECT_EQ(Buffers(Tiny(), "pp=2,dp=2", 2, 20000)[0].layout.buckets.size(), 1u);  // stage 1
  auto vpp = Buffers(Tiny(), "pp=2,vpp=2,dp=2", 0, 20000);
  ASSERT_EQ(vpp.size(), 2u);  // one DDP per model chunk
  EXPECT_GT(vpp[0].layout.buckets.size(), 1u);
  EXPECT_EQ(vpp[1].layout.buckets.size(), 1u);  // chunks > 0: bucketing disabled
  EXPECT_EQ(vpp[1].gbuf_index, 1);
  GptConfig tied = Tiny();
  tied.tied_embeddings = true;
  auto first = Buffers(tied, "pp=2,dp=2", 0)[0].layout, last = Buffers(tied, "pp=2,dp=2", 2)[0].layout;
  EXPECT_EQ(first.buckets.size(), 2u);  // the shared embedding's own bucket
  EXPECT_EQ(last.buckets.size(), 2u);
  EXPECT_EQ(first.buckets.back().end - first.buckets.back().start,
            last.buckets.front().end - last.buckets.front().start);
}

TEST(DistOptLayoutTest, ExpertParamsHaveTheirOwnBufferOnlyWithEp) {
  GptConfig moe = Tiny();
  moe.num_experts = 4;
  auto ep2 = Buffers(moe, "dp=4,ep=2", 3);
  ASSERT_EQ(ep2.size(), 2u);
  EXPECT_FALSE(ep2[0].expert);
  EXPECT_TRUE(ep2[1].expert);
  EXPECT_EQ(ep2[1].layout.dp_size, 2);  // expert DP = dp * cp / ep
  EXPECT_EQ(ep2[1].dp_rank, 1);
  EXPECT_EQ(ep2[1].dp_domain, "expert_dp_group_idx_1");
  EXPECT_EQ(IndexOf(ep2[0].layout, "decoder.layers.0.mlp.experts.local_experts.0.linear_fc1.weight"), -1);
  EXPECT_GE(IndexOf(ep2[0].layout, "decoder.layers.0.mlp.router.weight"), 0);
  auto ep1 = Buffers(moe, "dp=4", 0);  // allreduce stays True without EP
  ASSERT_EQ(ep1.size(), 1u);
  EXPECT_GE(IndexOf(ep1[0].layout, "decoder.layers.0.mlp.experts.local_experts.3.linear_fc2.weight"), 0);
}

// ---- optimizer states of whole jobs ----

struct Job {
  GptConfig cfg;
  ParallelConfig pc;
  std::vector<std::unique_ptr<DistOptimizerState>> ranks;
  std::vector<ShardedStateDict> dicts;
};

Job MakeJob(const GptConfig& cfg, const char* spec, int64_t bucket, OptimizerFormat f, bool fill) {
  Job j{cfg, *ParallelConfig::Parse(spec), {}, {}};
  for (int r = 0; r < j.pc.world_size(); ++r) {
    RankCoords c = *CoordsOf(j.pc, r);
    auto s = DistOptimizerState::Create(cfg, j.pc, c, *GptShards(cfg, j.pc, c), {bucket});
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    j.ranks.push_back(std::make_unique<DistOptimizerState>(std::move(s).value()));
    if (fill) {
      EXPECT_TRUE(j.ranks.back()->FillExpected(cfg.vocab_size).ok());
    }
    j.dicts.push_back(j.ranks.back()->StateDict(f));
  }
  return j;
}

// What the loader does, in memory: plan reads of `dst` against the main
// replicas of `src`, copy the runs, zero-fill padded vocab.
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

int64_t Mismatches(const Job& j, bool report = true) {
  int64_t bad = 0;
  for (const auto& r : j.ranks) {
    std::string where;
    auto n = r->CountMismatches(j.cfg.vocab_size, &where);
    EXPECT_TRUE(n.ok());
    if (*n && report) ADD_FAILURE() << "first mismatch: " << where;
    bad += *n;
  }
  return bad;
}

// Model-space main replicas of every optimizer key tile its global tensor once.
TEST(DistOptStateTest, ModelSpaceFragmentsTileEveryTensor) {
  for (const char* spec : {"dp=4", "tp=2,dp=2,pp=2", "tp=2,pp=2,vpp=2,dp=2", "dp=2,cp=2"}) {
    Job j = MakeJob(Tiny(), spec, 20000, OptimizerFormat::kModelSpace, false);
    std::map<std::string, std::vector<ShardedTensor>> by_key;
    std::map<std::string, Shape> shape;
    for (const auto& sd : j.dicts)
      for (const auto& t : sd.tensors())
        if (t.meta.is_main_replica()) {
          by_key[t.meta.key].push_back(t.meta);
          shape[t.meta.key] = t.meta.global_shape;
        }
    EXPECT_GT(by_key.size(), 3u * 8);
    for (const auto& [key, shards] : by_key)
      EXPECT_TRUE(CheckCoverage(key, shape[key], shards).ok()) << spec << " " << key;
  }
}

// A DP slice boundary inside a local fc1 [W_r; V_r] leaves a rank with the
// tail of W and the head of V: two fragments of one key.
TEST(DistOptStateTest, AnOwnedRangeAcrossSwigluHalvesYieldsAWAndAVFragment) {
  const int64_t half = 128 * 64;  // W rows [0,128) and V rows [128,256) of [256, 64]
  int genuine = 0;
  for (const char* spec : {"dp=2", "dp=3", "dp=5", "dp=8"}) {
    Job j = MakeJob(Tiny(), spec, 0, OptimizerFormat::kModelSpace, false);
    for (const auto& sd : j.dicts) {
      std::map<std::string, std::vector<ShardedTensor>> fc1;
      for (const auto& t : sd.tensors())
        if (t.meta.key.find("exp_avg.decoder.layers.") != std::string::npos &&
            t.meta.key.find("linear_fc1.weight") != std::string::npos)
          fc1[t.meta.key].push_back(t.meta);
      for (const auto& [key, f] : fc1) {
        if (f.size() != 2) continue;
        EXPECT_EQ(f[0].global_offset, (Shape{0, 0})) << key;  // W ...
        EXPECT_EQ(f[1].global_offset, (Shape{128, 0})) << key;  // ... then V
        EXPECT_EQ(f[0].flat_range->end, half);  // one contiguous owned range
        EXPECT_EQ(f[1].flat_range->begin, 0);
        genuine += f[0].flat_range->begin > 0 || f[1].flat_range->end < half;
      }
    }
  }
  EXPECT_GT(genuine, 0) << "no slice boundary fell inside a SwiGLU param: test is vacuous";
}

struct Change {
  const char* from;
  const char* to;
  int64_t from_bucket = 0, to_bucket = 0;
  bool tied = false;
  int experts = 0;
};

TEST(DistOptStateTest, ModelSpaceReshardsAcrossDpTpPpEpAndBucketSize) {
  for (const Change& c : std::vector<Change>{{"dp=4", "dp=2"},
                                             {"dp=2", "dp=8"},
                                             {"tp=2,dp=2,pp=2", "tp=1,dp=4,pp=1"},
                                             {"dp=2", "dp=2", 20000, 50000},
                                             {"tp=4,pp=2", "pp=2,vpp=2,dp=2,tp=2", 30000, 0},
                                             {"tp=2,pp=2,dp=2", "tp=1,dp=3", 0, 0, true},
                                             {"tp=2,dp=4,ep=4", "dp=2,ep=2", 20000, 0, false, 8},
                                             {"dp=2,ep=2", "dp=8,ep=8", 0, 0, false, 8}}) {
    GptConfig cfg = Tiny();
    cfg.tied_embeddings = c.tied;
    cfg.num_experts = c.experts;
    cfg.moe_ffn_hidden = 32;
    Job src = MakeJob(cfg, c.from, c.from_bucket, OptimizerFormat::kModelSpace, true);
    ASSERT_EQ(Mismatches(src), 0);
    Job dst = MakeJob(cfg, c.to, c.to_bucket, OptimizerFormat::kModelSpace, false);
    ASSERT_GT(Mismatches(dst, false), 0) << "a fresh state must not look loaded";
    Reshard(src, dst);
    EXPECT_EQ(Mismatches(dst), 0) << c.from << " -> " << c.to;
  }
}

TEST(DistOptStateTest, CorruptedElementsAndPaddingAreCounted) {
  Job j = MakeJob(Tiny(), "dp=3", 0, OptimizerFormat::kModelSpace, true);
  ASSERT_EQ(Mismatches(j), 0);
  DistOptimizerState& r2 = *j.ranks[2];
  const Bucket& last = r2.buffers()[0].layout.buckets.back();
  ASSERT_LT(last.numel_unpadded, last.end - last.start) << "no end padding to corrupt";
  auto& frag = j.dicts[2].tensors()[0].data;  // a fragment's fp32_param
  float v;
  std::memcpy(&v, frag.data(), 4);
  v = -v;
  std::memcpy(frag.data(), &v, 4);
  ShardedStateDict raw = r2.StateDict(OptimizerFormat::kBucketSpace);  // same memory
  auto& slice = raw.tensors()[raw.tensors().size() - 2].data;  // last bucket's exp_avg_sq
  std::memset(slice.data() + slice.size() - 4, 0x3f, 4);  // rank 2's tail is end padding
  std::string where;
  EXPECT_EQ(*r2.CountMismatches(j.cfg.vocab_size, &where), 2);
  EXPECT_NE(where.find("optimizer.state.fp32_param."), std::string::npos) << where;
}

// The raw slices of one DP size, read through the bucket-space keys, tile the buckets.
TEST(DistOptStateTest, BucketSpaceSlicesTileTheBuckets) {
  Job j = MakeJob(Tiny(), "tp=2,dp=2", 20000, OptimizerFormat::kBucketSpace, true);
  std::map<std::string, std::vector<ShardedTensor>> by_key;
  for (const auto& sd : j.dicts) {
    EXPECT_EQ(sd.objects().size(), 1u);
    for (const auto& t : sd.tensors()) by_key[t.meta.key].push_back(t.meta);
  }
  for (const auto& [key, shards] : by_key)
    if (key != kStepKey) {
      EXPECT_TRUE(CheckCoverage(key, shards[0].global_shape, shards).ok()) << key;
    }
  Job same = MakeJob(Tiny(), "tp=2,dp=2", 20000, OptimizerFormat::kBucketSpace, false);
  Reshard(j, same);
  EXPECT_EQ(Mismatches(same), 0);
}

// Loads `src`'s layout objects into a request of `dst`'s rank, then checks.
Status CheckLayout(const Job& src, const Job& dst, int rank) {
  ShardedStateDict req = dst.ranks[size_t(rank)]->BucketLayoutRequest();
  for (auto& want : req.objects())
    for (const auto& sd : src.dicts)
      for (const auto& o : sd.objects())
        if (o.meta.key == want.meta.key && o.meta.is_main_replica()) want.bytes = o.bytes;
  return dst.ranks[size_t(rank)]->CheckBucketLayout(req);
}

TEST(DistOptStateTest, BucketLayoutMismatchesAreExplained) {
  Job dp4 = MakeJob(Tiny(), "dp=4", 0, OptimizerFormat::kBucketSpace, true);
  EXPECT_TRUE(CheckLayout(dp4, dp4, 3).ok());
  Job dp2 = MakeJob(Tiny(), "dp=2", 0, OptimizerFormat::kBucketSpace, false);
  Status st = CheckLayout(dp4, dp2, 0);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("data-parallel size is 4, this job's is 2"), std::string::npos);
  EXPECT_NE(st.message().find("save it in model space (--optimizer model"), std::string::npos);
  Job huge = MakeJob(Tiny(), "dp=4", 1'000'000'000, OptimizerFormat::kBucketSpace, false);
  EXPECT_TRUE(CheckLayout(dp4, huge, 2).ok()) << "a bucket size that cuts the same buckets is fine";
  Job bucketed = MakeJob(Tiny(), "dp=4", 20000, OptimizerFormat::kBucketSpace, false);
  st = CheckLayout(dp4, bucketed, 1);
  EXPECT_NE(st.message().find("buckets differ"), std::string::npos) << st.message();
  Job tp2 = MakeJob(Tiny(), "tp=2,dp=2", 0, OptimizerFormat::kBucketSpace, false);
  EXPECT_NE(CheckLayout(dp4, tp2, 1).message().find("has no bucket layout"), std::string::npos);
  // Stage 1 holds 4 layers either way (same local names and sizes), but other ones.
  GptConfig a = Tiny(), b = Tiny();
  a.first_stage_layers = a.last_stage_layers = 2;
  b.first_stage_layers = 3;
  b.last_stage_layers = 1;
  Job pa = MakeJob(a, "pp=3", 0, OptimizerFormat::kBucketSpace, true);
  Job pb = MakeJob(b, "pp=3", 0, OptimizerFormat::kBucketSpace, false);
  EXPECT_NE(CheckLayout(pa, pb, 1).message().find("parameters laid out in it differ"),
            std::string::npos);
}

TEST(DistOptStateTest, FormatNamesRoundTrip) {
  EXPECT_EQ(*ParseOptimizerFormat("model"), OptimizerFormat::kModelSpace);
  EXPECT_EQ(*ParseOptimizerFormat("fully_sharded_model_space"), OptimizerFormat::kModelSpace);
  EXPECT_EQ(OptimizerFormatName(*ParseOptimizerFormat("bucket")), "bucket");
  EXPECT_EQ(*ParseOptimizerFormat("fully_reshardable"), OptimizerFormat::kFullyReshardable);
  EXPECT_EQ(*ParseOptimizerFormat("dp_reshardable"), OptimizerFormat::kDpReshardable);
  EXPECT_NE(ParseOptimizerFormat("dp_zero_gather_scatter").status().message().find("known: fully_reshardable"),
            std::string::npos);
  EXPECT_TRUE(IsBucketSpace(OptimizerFormat::kDpReshardable) && IsModelSpace(OptimizerFormat::kFullyReshardable));
  EXPECT_EQ(McoreBufferDtypeName(DType::kBFloat16), "(torch.bfloat16, torch.float32)");
}

// fully_reshardable: MCore's keys (param, not fp32_param) over the params'
// global tensors; reshards across DP, TP, PP, EP and bucket size like model space.
TEST(DistOptStateTest, FullyReshardableUsesMcoreNamesAndReshardsEverywhere) {
  Job j = MakeJob(Tiny(), "tp=2,dp=2", 0, OptimizerFormat::kFullyReshardable, true);
  std::set<std::string> keys;
  for (const auto& sd : j.dicts)
    for (const auto& t : sd.tensors()) keys.insert(t.meta.key);
  EXPECT_TRUE(keys.count("optimizer.state.param.decoder.layers.0.self_attention.linear_qkv.weight"));
  EXPECT_TRUE(keys.count("optimizer.state.exp_avg_sq.embedding.word_embeddings.weight"));
  for (const auto& k : keys) EXPECT_EQ(k.find("fp32_param"), std::string::npos) << k;
  for (const Change& c : std::vector<Change>{{"tp=2,dp=2,pp=2", "tp=1,dp=3", 20000, 0, true},
                                             {"tp=2,dp=4,ep=4", "tp=1,pp=2,dp=2,ep=2", 30000, 0, false, 8}}) {
    GptConfig cfg = Tiny();
    cfg.tied_embeddings = c.tied;
    cfg.num_experts = c.experts;
    cfg.moe_ffn_hidden = 32;
    Job src = MakeJob(cfg, c.from, c.from_bucket, OptimizerFormat::kFullyReshardable, true);
    Job dst = MakeJob(cfg, c.to, c.to_bucket, OptimizerFormat::kFullyReshardable, false);
    Reshard(src, dst);
    EXPECT_EQ(Mismatches(dst), 0) << c.from << " -> " << c.to;
  }
}

// A loader registering whole-parameter boxes (MCore's fully_reshardable load:
// no flattened_range) reads what DP ranks saved as fragments.
TEST(DistOptStateTest, FullyReshardableLoadsAsWholeParameterBoxes) {
  GptConfig cfg = Tiny();
  Job src = MakeJob(cfg, "dp=3", 0, OptimizerFormat::kFullyReshardable, true);
  ParallelConfig pc = *ParallelConfig::Parse("tp=2");
  std::vector<SavedShard> saved;
  std::vector<std::span<const std::byte>> data;
  for (const auto& sd : src.dicts)
    for (const auto& t : sd.tensors())
      if (t.meta.is_main_replica()) {
        saved.push_back({t.meta, 0, 0, {}});
        data.push_back(t.data);
      }
  int64_t checked = 0;
  auto target = GptShards(cfg, pc, *CoordsOf(pc, 1));
  ASSERT_TRUE(target.ok());
  for (const GptShard& g : *target) {
    ShardedTensor req = g.tensor;  // the param's box, as MCore's loader requests it
    req.key = "optimizer.state.exp_avg." + g.tensor.key;
    req.dtype = DType::kFloat32;
    auto plan = PlanReads(saved, {req});
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    std::vector<std::byte> buf(size_t(req.num_bytes()));
    for (const ChunkRead& cr : plan->requests[0].reads)
      for (const CopyRun& run : cr.runs)
        std::memcpy(buf.data() + run.dst * 4, data[size_t(cr.saved_shard)].data() + run.src * 4, size_t(run.len) * 4);
    ShardedTensor expect = g.tensor;
    expect.key += "/exp_avg";
    expect.dtype = DType::kFloat32;
    int64_t first = -1;
    EXPECT_EQ(*workload::CountMismatches(expect, buf, &first, cfg.vocab_size), 0) << g.tensor.key;
    checked += req.num_elements();
  }
  EXPECT_GT(checked, 100000);
}

// dp_reshardable: MCore's bucket keys over the UNPADDED bucket, so the state
// loads at another DP size (4 -> 3 -> 2) with the same bucket boundaries.
TEST(DistOptStateTest, DpReshardableUsesMcoreKeysAndLoadsAtAnotherDp) {
  Job dp4 = MakeJob(Tiny(), "dp=4", 40000, OptimizerFormat::kDpReshardable, true);
  std::map<std::string, std::vector<ShardedTensor>> by_key;
  for (const auto& sd : dp4.dicts)
    for (const auto& t : sd.tensors()) by_key[t.meta.key].push_back(t.meta);
  const std::string k0 = "optimizer.distributed.dp_group_idx_0.gbuf_idx_0.dtype_(torch.bfloat16, torch.float32)."
                         "bucket_idx_0.param";
  ASSERT_TRUE(by_key.count(k0)) << by_key.begin()->first;
  const Bucket& b0 = dp4.ranks[0]->buffers()[0].layout.buckets[0];
  EXPECT_EQ(by_key[k0][0].global_shape, (Shape{b0.numel_unpadded}));  // not the DP-padded size
  for (const auto& [key, shards] : by_key)
    if (key != kStepKey) {
      EXPECT_TRUE(CheckCoverage(key, shards[0].global_shape, shards).ok()) << key;
    }
  std::set<std::string> objects;
  for (const auto& o : dp4.dicts[1].objects()) objects.insert(o.meta.key);
  EXPECT_TRUE(objects.count("optimizer.distributed.dp_group_idx_0.per_bucket_numel_unpadded"));
  EXPECT_TRUE(objects.count("optimizer.distributed.dp_group_idx_0.gbuf_idx_0.param_layout"));
  for (const char* to : {"dp=3", "dp=2"}) {
    Job dst = MakeJob(Tiny(), to, 40000, OptimizerFormat::kDpReshardable, false);
    bool padding_differs = false;  // else the test would not show a DP change
    for (size_t b = 0; b < dst.ranks[0]->buffers()[0].layout.buckets.size(); ++b)
      padding_differs |= dst.ranks[0]->buffers()[0].layout.buckets[b].end !=
                         dp4.ranks[0]->buffers()[0].layout.buckets[b].end;
    if (std::string(to) == "dp=3") {
      ASSERT_TRUE(padding_differs) << "lcm(3, 128) must pad differently";
    }
    Reshard(dp4, dst);
    EXPECT_EQ(Mismatches(dst), 0) << "dp=4 -> " << to;
  }
}

Status CheckMcoreLayout(const Job& src, const Job& dst, int rank) {
  ShardedStateDict req = dst.ranks[size_t(rank)]->LayoutRequest(OptimizerFormat::kDpReshardable);
  for (auto& want : req.objects())
    for (const auto& sd : src.dicts)
      for (const auto& o : sd.objects())
        if (o.meta.key == want.meta.key && o.meta.is_main_replica()) want.bytes = o.bytes;
  return dst.ranks[size_t(rank)]->CheckLayout(OptimizerFormat::kDpReshardable, req);
}

TEST(DistOptStateTest, DpReshardableRefusesOtherSplitsAndBucketSizes) {
  Job dp4 = MakeJob(Tiny(), "dp=4", 40000, OptimizerFormat::kDpReshardable, true);
  Job dp3 = MakeJob(Tiny(), "dp=3", 40000, OptimizerFormat::kDpReshardable, false);
  EXPECT_TRUE(CheckMcoreLayout(dp4, dp3, 2).ok());
  Job other_bucket = MakeJob(Tiny(), "dp=4", 0, OptimizerFormat::kDpReshardable, false);
  Status st = CheckMcoreLayout(dp4, other_bucket, 0);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("per-bucket unpadded sizes"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--optimizer fully_reshardable"), std::string::npos) << st.message();
  Job tp2 = MakeJob(Tiny(), "tp=2,dp=2", 40000, OptimizerFormat::kDpReshardable, false);
  st = CheckMcoreLayout(dp4, tp2, 1);  // model-parallel rank 1 has no buffers in a TP1 checkpoint
  EXPECT_NE(st.message().find("has no optimizer buffer 'optimizer.distributed.dp_group_idx_1.gbuf_idx_0"),
            std::string::npos) << st.message();
}

// With expert buffers MCore chains two optimizers and prefixes their keys.
TEST(DistOptStateTest, DpReshardableKeysOfChainedDenseAndExpertOptimizers) {
  GptConfig moe = Tiny();
  moe.num_experts = 8;
  moe.moe_ffn_hidden = 32;
  Job j = MakeJob(moe, "tp=2,dp=4,ep=4", 0, OptimizerFormat::kDpReshardable, true);
  std::set<std::string> prefixes;
  for (const auto& t : j.dicts[3].tensors())
    if (t.meta.key != kStepKey) prefixes.insert(t.meta.key.substr(0, t.meta.key.find(".gbuf_idx")));
  // Rank 3 is tp 1, ep 1: dense index tp + 2 * pp = 1, expert index (expert TP
  // x EP x PP group) tp + 2 * (ep + 4 * pp) = 3.
  EXPECT_EQ(prefixes, (std::set<std::string>{"chained_0.optimizer.distributed.dp_group_idx_1",
                                             "chained_1.optimizer.distributed.dp_group_idx_3"}));
  Job dense = MakeJob(Tiny(), "tp=2,pp=2,dp=2", 0, OptimizerFormat::kDpReshardable, true);
  EXPECT_EQ(dense.dicts[7].tensors()[0].meta.key.rfind("optimizer.distributed.dp_group_idx_3.gbuf_idx_0", 0), 0u)
      << dense.dicts[7].tensors()[0].meta.key;  // tp 1 + 2 * pp 1
}

// Saves every rank's dict of `j` through SaveCheckpoint, threads as ranks (the
// real save checks that each shard has exactly one main replica).
Status SaveJob(const Job& j, const std::string& root) {
  auto comms = MakeThreadComms(j.pc.world_size());
  std::vector<Status> st(size_t(j.pc.world_size()));
  std::vector<std::thread> threads;
  for (int r = 0; r < j.pc.world_size(); ++r)
    threads.emplace_back([&, r] {
      SaveOptions o;
      o.root = root;
      o.iteration = 1;
      o.comm = comms[size_t(r)].get();
      auto res = SaveCheckpoint(j.dicts[size_t(r)], o);
      st[size_t(r)] = res.ok() ? Status::Ok() : res.status();
    });
  for (auto& t : threads) t.join();
  for (const Status& s : st)
    if (!s.ok()) return s;
  return Status::Ok();
}

// Loads the tensors of every rank of `dst` (one rank at a time, no comm).
Status LoadJobTensors(Job& dst, const std::string& root) {
  for (auto& sd : dst.dicts) {
    ShardedStateDict tensors;
    for (auto& t : sd.tensors()) tensors.AddTensor(t.meta, t.data);
    LoadOptions lo;
    lo.root = root;
    auto st = LoadCheckpoint(tensors, lo);
    if (!st.ok()) return st.status();
  }
  return Status::Ok();
}

// The param-layout objects `src` saves (main replicas), key -> JSON.
std::map<std::string, std::string> SavedDpLayouts(const Job& src) {
  std::map<std::string, std::string> out;
  for (const auto& sd : src.dicts)
    for (const auto& o : sd.objects())
      if (o.meta.key.ends_with(".param_layout") && o.meta.is_main_replica())
        out[o.meta.key] = std::string(reinterpret_cast<const char*>(o.bytes.data()), o.bytes.size());
  return out;
}

// Every rank of `dst` maps its fragments onto the buckets `src` saved (as
// PrepareDpReshardableLoad does); its dicts are rebuilt to request them.
Status UseSavedLayouts(Job& dst, const Job& src) {
  const auto saved = SavedDpLayouts(src);
  for (size_t r = 0; r < dst.ranks.size(); ++r) {
    const Status st = dst.ranks[r]->UseSavedDpLayouts(saved);
    if (!st.ok()) return st.WithContext("rank " + std::to_string(r));
    dst.dicts[r] = dst.ranks[r]->StateDict(OptimizerFormat::kDpReshardable);
  }
  return Status::Ok();
}

// dp_reshardable with EP > 1: MCore keys expert buffers by the rank in the
// expert TP x EP x PP group, so the EP ranks of one expert-DP group write
// different keys (before, both claimed "dp_group_idx_<tp + tp*pp>" and the save
// failed: "ranks 0 and 1 both hold its main replica"). Saved at EP 2, it loads
// at other DP sizes (dense DP 4 -> 2 / 6, expert DP 2 -> 1 / 3) in MCore's way
// (equal buckets), and - ckpt's extension, through the saved param layouts -
// at EP 1 (the experts move into the dense buffer), EP 4 and another bucket
// size, every element checked. A TP change is refused with the way out.
TEST(DistOptStateTest, DpReshardableWithExpertParallelSavesAndLoadsAtAnotherDp) {
  GptConfig moe = Tiny();
  moe.num_experts = 8;
  moe.moe_ffn_hidden = 32;
  Job src = MakeJob(moe, "tp=2,dp=4,ep=2", 40000, OptimizerFormat::kDpReshardable, true);
  ASSERT_EQ(Mismatches(src), 0);
  const std::string root = testing::ScratchDir("dp_reshardable_ep2");
  const Status saved = SaveJob(src, root);
  ASSERT_TRUE(saved.ok()) << saved.ToString();
  struct Target {
    const char* layout;
    int64_t bucket;
    bool mcore;  // MCore's case: equal buckets, only DP changes
  };
  const Target targets[] = {
      {"tp=2,dp=4,ep=2", 40000, true}, {"tp=2,dp=2,ep=2", 40000, true}, {"tp=2,dp=6,ep=2", 40000, true},
      {"tp=2,dp=4", 40000, false},     {"tp=2,dp=2", 40000, false},     {"tp=2,dp=3", 40000, false},  // EP 2 -> 1
      {"tp=2,dp=4,ep=4", 40000, false},  // EP 2 -> 4
      {"tp=2,dp=4,ep=2", 0, false},      // one bucket per buffer
      {"tp=2,pp=2,dp=2,ep=2", 40000, false}};  // per-layer keys: the same boxes on other stages
  for (const auto& [to, bucket, mcore] : targets) {
    Job dst = MakeJob(moe, to, bucket, OptimizerFormat::kDpReshardable, false);
    ASSERT_GT(Mismatches(dst, false), 0) << "a fresh state must not look loaded";
    for (int r = 0; r < dst.pc.world_size(); ++r)
      EXPECT_EQ(CheckMcoreLayout(src, dst, r).ok(), mcore) << to << " rank " << r;
    const Status remapped = UseSavedLayouts(dst, src);
    ASSERT_TRUE(remapped.ok()) << to << ": " << remapped.ToString();
    const Status loaded = LoadJobTensors(dst, root);
    ASSERT_TRUE(loaded.ok()) << to << ": " << loaded.ToString();
    EXPECT_EQ(Mismatches(dst), 0) << "tp=2,dp=4,ep=2 -> " << to << " bucket " << bucket;
    int64_t elems = 0;
    for (const auto& r : dst.ranks) elems += r->StateElements();
    EXPECT_GT(elems, 3 * 100000) << to;
  }
  Job tp1 = MakeJob(moe, "tp=1,dp=4,ep=2", 40000, OptimizerFormat::kDpReshardable, false);
  const Status st = UseSavedLayouts(tp1, src);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("no saved bucket holds parameter"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--optimizer fully_reshardable"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace ckpt::reshard
