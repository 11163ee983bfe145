// Tests for reshard/geometry/read_plan.h: exact chunk reads on small cases, vocab
// padding in both directions, shared-chunk dedup, error cases, a randomized
// end-to-end check that executes plans on synthetic data, and a timing of a
// large synthetic plan.
#include "reshard/geometry/read_plan.h"

#include <gtest/gtest.h>

#include <chrono>
#include <iostream>
#include <random>

namespace ckpt::reshard {
namespace {

using Runs = std::vector<CopyRun>;

ShardedTensor Box(const std::string& key, Shape global, Shape offset, Shape local,
                  std::optional<FlatRange> flat = std::nullopt, DType dtype = DType::kBFloat16) {
  ShardedTensor t;
  t.key = key;
  t.dtype = dtype;
  t.global_shape = std::move(global);
  t.global_offset = std::move(offset);
  t.local_shape = std::move(local);
  t.flat_range = flat;
  return t;
}

SavedShard Saved(ShardedTensor meta, int file, int64_t chunk_elems,
                 std::vector<int64_t> stored = {}) {
  return {std::move(meta), file, chunk_elems, std::move(stored)};
}

// Row blocks along axis 0 of `global`, `parts` equal parts.
std::vector<ShardedTensor> Rows(const std::string& key, const Shape& g, int64_t parts) {
  std::vector<ShardedTensor> out;
  const int64_t rows = (g[0] + parts - 1) / parts;
  for (int64_t p = 0; p < parts; ++p) {
    Shape off(g.size(), 0), ext = g;
    off[0] = p * rows;
    ext[0] = std::min(rows, g[0] - off[0]);
    out.push_back(Box(key, g, off, ext));
  }
  return out;
}

// ---- Plan executor over synthetic data ------------------------------------------

// Value of global point p; never 0, so 0 marks "not written" (zero fill).
int64_t ValueAt(const Shape& p) {
  int64_t v = 1;
  for (int64_t c : p) v = v * 100003 + c + 1;
  return v;
}

Shape GlobalPoint(const ShardedTensor& t, int64_t flat) {
  int64_t lin = flat + (t.flat_range ? t.flat_range->begin : 0);
  Shape p(t.local_shape.size());
  for (size_t d = p.size(); d-- > 0;) {
    p[d] = t.global_offset[d] + lin % t.local_shape[d];
    lin /= t.local_shape[d];
  }
  return p;
}

bool Inside(const Shape& p, const Shape& g) {
  for (size_t d = 0; d < p.size(); ++d)
    if (p[d] >= g[d]) return false;
  return true;
}

const Shape& SavedGlobal(const std::vector<SavedShard>& saved, const std::string& key) {
  for (const SavedShard& s : saved)
    if (s.meta.key == key) return s.meta.global_shape;
  static const Shape kNone;
  return kNone;
}

// Executes `plan` and checks every requested element holds the saved value
// (or 0 outside the saved global shape), written exactly once.
void ExecuteAndVerify(const ReadPlan& plan, const std::vector<SavedShard>& saved,
                      const std::vector<ShardedTensor>& requests) {
  ASSERT_EQ(plan.requests.size(), requests.size());
  for (const RequestPlan& rp : plan.requests) {
    const ShardedTensor& req = requests[size_t(rp.request)];
    std::vector<int64_t> buf(size_t(req.num_elements()), 0);
    std::vector<int> writes(buf.size(), 0);
    int64_t covered = 0;
    for (const ChunkRead& cr : rp.reads) {
      const SavedShard& s = saved[size_t(cr.saved_shard)];
      const int64_t c = s.chunk_elems > 0 ? s.chunk_elems : s.meta.num_elements();
      const int64_t chunk_len = std::min(c, s.meta.num_elements() - cr.chunk * c);
      for (const CopyRun& r : cr.runs) {
        ASSERT_GT(r.len, 0);
        ASSERT_GE(r.src, 0);
        ASSERT_LE(r.src + r.len, chunk_len) << "run leaves its chunk";
        for (int64_t k = 0; k < r.len; ++k) {
          buf[size_t(r.dst + k)] = ValueAt(GlobalPoint(s.meta, cr.chunk * c + r.src + k));
          ++writes[size_t(r.dst + k)];
        }
        covered += r.len;
      }
    }
    EXPECT_EQ(covered, rp.covered_elems);
    const Shape& saved_global = SavedGlobal(saved, req.key);
    int64_t zeros = 0;
    for (int64_t f = 0; f < req.num_elements(); ++f) {
      Shape p = GlobalPoint(req, f);
      const bool in = Inside(p, saved_global);
      ASSERT_EQ(writes[size_t(f)], in ? 1 : 0) << req.DebugString() << " flat " << f;
      ASSERT_EQ(buf[size_t(f)], in ? ValueAt(p) : 0) << req.DebugString() << " flat " << f;
      zeros += !in;
    }
    EXPECT_EQ(zeros, rp.zero_fill_elems);
  }
}

// ---- Small exact cases ----------------------------------------------------------

TEST(ReadPlanTest, Tp4ToTp2SplitsRunsAtChunks) {
  std::vector<SavedShard> saved;
  for (int i = 0; auto& m : Rows("w", {8, 4}, 4))
    saved.push_back(Saved(m, i++ / 2, 3, {10, 11, 12}));
  auto plan = PlanReads(saved, {Rows("w", {8, 4}, 2)[0]});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const RequestPlan& rp = plan->requests.at(0);
  ASSERT_EQ(rp.reads.size(), 6u);
  const Runs want[6] = {{{0, 0, 3}}, {{0, 3, 3}},  {{0, 6, 2}},
                        {{0, 8, 3}}, {{0, 11, 3}}, {{0, 14, 2}}};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(rp.reads[i].saved_shard, int(i / 3));
    EXPECT_EQ(rp.reads[i].chunk, int64_t(i % 3));
    EXPECT_EQ(rp.reads[i].runs, want[i]);
  }
  EXPECT_EQ(rp.covered_elems, 16);
  EXPECT_EQ(rp.zero_fill_elems, 0);
  EXPECT_EQ(plan->chunks_read, 6);
  EXPECT_EQ(plan->bytes_read, 2 * (10 + 11 + 12));
  EXPECT_EQ(plan->files, (std::set<int>{0}));
  ExecuteAndVerify(*plan, saved, {Rows("w", {8, 4}, 2)[0]});
}

TEST(ReadPlanTest, Axis1RunsCrossingChunkBoundariesAreSplit) {
  // Saved TP2 on axis 1 of [4, 8]: box [4, 4], chunks of 5. Requested cols
  // [2, 4): saved runs {2,0,2} {6,2,2} {10,4,2} {14,6,2}; the last crosses 15.
  std::vector<SavedShard> saved = {Saved(Box("w", {4, 8}, {0, 0}, {4, 4}), 0, 5),
                                   Saved(Box("w", {4, 8}, {0, 4}, {4, 4}), 1, 5)};
  ShardedTensor req = Box("w", {4, 8}, {0, 2}, {4, 2});
  auto plan = PlanReads(saved, {req});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto& reads = plan->requests[0].reads;
  ASSERT_EQ(reads.size(), 4u);
  EXPECT_EQ(reads[0].runs, (Runs{{2, 0, 2}}));
  EXPECT_EQ(reads[1].runs, (Runs{{1, 2, 2}}));
  EXPECT_EQ(reads[2].runs, (Runs{{0, 4, 2}, {4, 6, 1}}));
  EXPECT_EQ(reads[3].runs, (Runs{{0, 7, 1}}));
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(reads[i].chunk, int64_t(i));
  EXPECT_EQ(plan->files, (std::set<int>{0}));
  // No stored sizes: bytes fall back to raw chunk bytes (5,5,5,1 bf16 elements).
  EXPECT_EQ(plan->bytes_read, 16 * 2);
  ExecuteAndVerify(*plan, saved, {req});
}

TEST(ReadPlanTest, ChunkSharedByTwoRequestsIsReadOnce) {
  std::vector<SavedShard> saved = {Saved(Box("w", {4, 8}, {0, 0}, {4, 4}), 0, 8, {100, 90}),
                                   Saved(Box("w", {4, 8}, {0, 4}, {4, 4}), 3, 8, {80, 70})};
  std::vector<ShardedTensor> reqs = {Box("w", {4, 8}, {0, 0}, {4, 2}),
                                     Box("w", {4, 8}, {0, 2}, {4, 2}),
                                     Box("w", {4, 8}, {0, 4}, {1, 4})};
  auto plan = PlanReads(saved, reqs);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->requests[0].reads.size(), 2u);
  EXPECT_EQ(plan->requests[1].reads.size(), 2u);
  EXPECT_EQ(plan->requests[2].reads.size(), 1u);
  EXPECT_EQ(plan->chunks_read, 3);             // not 5
  EXPECT_EQ(plan->bytes_read, 100 + 90 + 80);  // not 100+90+100+90+80
  EXPECT_EQ(plan->files, (std::set<int>{0, 3}));
  ExecuteAndVerify(*plan, saved, reqs);
}

TEST(ReadPlanTest, RankZeroAndEmptyRequests) {
  std::vector<SavedShard> saved = {
      Saved(Box("step", {}, {}, {}, std::nullopt, DType::kInt64), 2, 0)};
  ShardedTensor req = Box("step", {}, {}, {}, std::nullopt, DType::kInt64);
  ShardedTensor empty = req;
  empty.flat_range = FlatRange{0, 0};
  auto plan = PlanReads(saved, {req, empty});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->requests[0].reads.size(), 1u);
  EXPECT_EQ(plan->requests[0].reads[0].runs, (Runs{{0, 0, 1}}));
  EXPECT_TRUE(plan->requests[1].reads.empty());
  EXPECT_EQ(plan->bytes_read, 8);
  EXPECT_EQ(plan->files, (std::set<int>{2}));
}

TEST(ReadPlanTest, NonMainReplicasAreIgnored) {
  std::vector<SavedShard> saved;
  for (auto& m : Rows("w", {8, 4}, 2)) saved.push_back(Saved(m, 0, 4));
  SavedShard replica = saved[0];
  replica.meta.replica_id = {1};
  replica.file_index = 7;
  saved.push_back(replica);
  auto plan = PlanReads(saved, {Box("w", {8, 4}, {0, 0}, {8, 4})});
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->requests[0].covered_elems, 32);
  EXPECT_EQ(plan->files, (std::set<int>{0}));
}

// ---- Padded vocab ------------------------------------------------------------------

TEST(ReadPlanTest, PaddedVocabSavedLargerThanRequested) {
  // Saved [50432, h] at TP4 (12608 rows each); requested [50304, h] at TP2.
  const int64_t h = 4;
  std::vector<SavedShard> saved;
  for (int i = 0; auto& m : Rows("emb", {50432, h}, 4)) saved.push_back(Saved(m, i++, 256));
  auto reqs = Rows("emb", {50304, h}, 2);
  for (auto& r : reqs) r.allow_shape_mismatch = true;
  auto plan = PlanReads(saved, reqs);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // Request 1 = rows [25152, 50304): 64 rows of shard 1, all of shard 2,
  // 12480 rows of shard 3 (its last 128 rows are padding, never read).
  EXPECT_EQ(plan->requests[1].reads.front().saved_shard, 1);
  EXPECT_EQ(plan->requests[1].reads.front().runs.front(),
            (CopyRun{(25152 - 12608) * h % 256, 0, 64 * h}));
  EXPECT_EQ(plan->requests[1].reads.back().saved_shard, 3);
  EXPECT_EQ(plan->requests[1].covered_elems, 25152 * h);
  EXPECT_EQ(plan->requests[1].zero_fill_elems, 0);
  EXPECT_EQ(plan->requests[0].zero_fill_elems, 0);
  // Shard 3's last 2 chunks (50432*h/4/256 = 197 in all) hold only padding
  // rows (>= 50304) and are not read.
  const int64_t shard3_needed = (50304 - 37824) * h;
  int64_t max_chunk = 0;
  for (const ChunkRead& cr : plan->requests[1].reads)
    if (cr.saved_shard == 3) max_chunk = std::max(max_chunk, cr.chunk);
  EXPECT_EQ(max_chunk, (shard3_needed - 1) / 256);
  EXPECT_EQ(max_chunk, 194);
  ExecuteAndVerify(*plan, saved, reqs);
}

TEST(ReadPlanTest, PaddedVocabSavedSmallerThanRequested) {
  // Saved [50304, h] at TP2; requested [50432, h] at TP4: the last request
  // gets 12480 saved rows and 128 zero-filled rows.
  const int64_t h = 4;
  std::vector<SavedShard> saved;
  for (int i = 0; auto& m : Rows("emb", {50304, h}, 2)) saved.push_back(Saved(m, i++, 1 << 17));
  auto reqs = Rows("emb", {50432, h}, 4);
  for (auto& r : reqs) r.allow_shape_mismatch = true;
  auto plan = PlanReads(saved, reqs);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(plan->requests[size_t(i)].zero_fill_elems, 0);
  EXPECT_EQ(plan->requests[3].zero_fill_elems, 128 * h);
  EXPECT_EQ(plan->requests[3].covered_elems, 12480 * h);
  ASSERT_EQ(plan->requests[3].reads.size(), 1u);  // one chunk of saved shard 1
  EXPECT_EQ(plan->requests[3].reads[0].runs, (Runs{{(37824 - 25152) * h, 0, 12480 * h}}));
  ExecuteAndVerify(*plan, saved, reqs);
}

TEST(ReadPlanTest, ShapeMismatchWithoutOptInIsRejected) {
  std::vector<SavedShard> saved;
  for (auto& m : Rows("emb", {50432, 4}, 4)) saved.push_back(Saved(m, 0, 1024));
  auto plan = PlanReads(saved, {Rows("emb", {50304, 4}, 2)[0]});
  ASSERT_EQ(plan.status().code(), Code::kInvalidArgument);
  const std::string m = plan.status().message();
  EXPECT_NE(m.find("'emb'"), std::string::npos) << m;
  EXPECT_NE(m.find("[50432, 4]"), std::string::npos) << m;
  EXPECT_NE(m.find("[50304, 4]"), std::string::npos) << m;
  // A rank change is never allowed, even with the opt-in.
  ShardedTensor flat = Box("emb", {50432 * 4}, {0}, {50432 * 4});
  flat.allow_shape_mismatch = true;
  EXPECT_EQ(PlanReads(saved, {flat}).status().code(), Code::kInvalidArgument);
}

// ---- Errors --------------------------------------------------------------------------

TEST(ReadPlanTest, Errors) {
  std::vector<SavedShard> saved;
  for (auto& m : Rows("w", {8, 4}, 4)) saved.push_back(Saved(m, 0, 4));
  auto missing = PlanReads(saved, {Box("nope", {8, 4}, {0, 0}, {8, 4})});
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_EQ(missing.status().message(), "tensor 'nope' is not in the checkpoint");

  auto dtype = PlanReads(saved, {Box("w", {8, 4}, {0, 0}, {8, 4}, std::nullopt, DType::kFloat32)});
  ASSERT_EQ(dtype.status().code(), Code::kInvalidArgument);
  EXPECT_NE(dtype.status().message().find("bf16"), std::string::npos) << dtype.status().message();
  EXPECT_NE(dtype.status().message().find("fp32"), std::string::npos) << dtype.status().message();

  auto bad_req = PlanReads(saved, {Box("w", {8, 4}, {6, 0}, {4, 4})});
  EXPECT_EQ(bad_req.status().code(), Code::kInvalidArgument);

  std::vector<SavedShard> gap = saved;
  gap.erase(gap.begin() + 1);  // rows [2, 4) missing
  auto g = PlanReads(gap, {Rows("w", {8, 4}, 2)[1], Rows("w", {8, 4}, 2)[0]});
  ASSERT_EQ(g.status().code(), Code::kInvalidArgument);
  EXPECT_NE(g.status().message().find("'w'"), std::string::npos) << g.status().message();
  EXPECT_NE(g.status().message().find("8 of 16"), std::string::npos) << g.status().message();

  std::vector<SavedShard> dup = saved;
  dup.push_back(saved[0]);
  EXPECT_EQ(PlanReads(dup, {Rows("w", {8, 4}, 1)[0]}).status().code(), Code::kCorruption);

  std::vector<SavedShard> malformed = saved;
  malformed[2].meta.local_shape = {4};
  EXPECT_EQ(PlanReads(malformed, {Rows("w", {8, 4}, 1)[0]}).status().code(), Code::kCorruption);
}

// ---- Randomized end-to-end ---------------------------------------------------------

// Random exact partition: a grid of boxes (random cuts per axis), each box
// optionally split into flat ranges (distributed-optimizer style).
std::vector<ShardedTensor> RandomPartition(std::mt19937& rng, const std::string& key,
                                           const Shape& g) {
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  std::vector<std::vector<int64_t>> cuts(g.size());
  for (size_t d = 0; d < g.size(); ++d) {
    cuts[d] = {0, g[d]};
    for (int64_t k = uni(0, 3); k > 0; --k) cuts[d].push_back(uni(0, g[d]));
    std::sort(cuts[d].begin(), cuts[d].end());
  }
  std::vector<ShardedTensor> out;
  std::vector<size_t> idx(g.size(), 0);
  for (;;) {
    Shape off(g.size()), ext(g.size());
    for (size_t d = 0; d < g.size(); ++d) {
      off[d] = cuts[d][idx[d]];
      ext[d] = cuts[d][idx[d] + 1] - off[d];
    }
    const int64_t n = NumElements(ext);
    std::vector<int64_t> fc = {0, n};
    const bool flat = uni(0, 1) == 1;
    if (flat)
      for (int64_t k = uni(1, 3); k > 0; --k) fc.push_back(uni(0, n));
    std::sort(fc.begin(), fc.end());
    for (size_t i = 0; i + 1 < fc.size(); ++i)
      out.push_back(
          Box(key, g, off, ext, flat ? std::optional(FlatRange{fc[i], fc[i + 1]}) : std::nullopt));
    size_t d = g.size();
    while (d > 0 && ++idx[d - 1] + 1 == cuts[d - 1].size()) idx[--d] = 0;
    if (d == 0) break;
  }
  return out;
}

TEST(ReadPlanTest, RandomRepartitionsExecuteCorrectly) {
  std::mt19937 rng(99);
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<SavedShard> saved;
    std::vector<ShardedTensor> reqs;
    for (int k = 0; k < 3; ++k) {
      const std::string key = "t" + std::to_string(k);
      Shape g(size_t(std::uniform_int_distribution<int>(1, 3)(rng)));
      for (auto& d : g) d = std::uniform_int_distribution<int64_t>(1, 7)(rng);
      for (auto& m : RandomPartition(rng, key, g))
        saved.push_back(
            Saved(m, int(saved.size() % 5), std::uniform_int_distribution<int64_t>(1, 9)(rng)));
      for (auto& r : RandomPartition(rng, key, g)) reqs.push_back(r);
    }
    std::shuffle(saved.begin(), saved.end(), rng);
    auto plan = PlanReads(saved, reqs);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    ExecuteAndVerify(*plan, saved, reqs);
    if (::testing::Test::HasFatalFailure()) return;
  }
}

// ---- Timing of a large synthetic plan -------------------------------------------

double Millis(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

TEST(ReadPlanTest, LargeSyntheticPlanTiming) {
  // 1000 keys of [1024, 1024] bf16; 64 saved shards per key (axis-0 rows of 16,
  // chunks of 4 rows); 64 requests per key in a 32 x 2 grid (so each request
  // reads half-rows of 2 saved shards).
  const int kKeys = 1000;
  std::vector<SavedShard> saved;
  std::vector<ShardedTensor> reqs;
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = "layer." + std::to_string(k) + ".weight";
    for (int i = 0; auto& m : Rows(key, {1024, 1024}, 64)) saved.push_back(Saved(m, i++ % 8, 4096));
    for (int64_t r = 0; r < 32; ++r)
      for (int64_t c = 0; c < 2; ++c)
        reqs.push_back(Box(key, {1024, 1024}, {r * 32, c * 512}, {32, 512}));
  }
  std::shuffle(saved.begin(), saved.end(), std::mt19937(5));
  auto t0 = std::chrono::steady_clock::now();
  auto plan = PlanReads(saved, reqs);
  const double grid_ms = Millis(t0);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->chunks_read, int64_t(kKeys) * 256);
  int64_t runs = 0;
  for (const auto& rp : plan->requests) {
    EXPECT_EQ(rp.covered_elems, 32 * 512);
    for (const auto& cr : rp.reads) runs += int64_t(cr.runs.size());
  }

  // Distributed-optimizer layout: saved TP8 x DP8 flat ranges, requested TP4 x DP16.
  std::vector<SavedShard> osaved;
  std::vector<ShardedTensor> oreqs;
  const int64_t n8 = 128 * 1024, n4 = 256 * 1024;
  for (int k = 0; k < kKeys; ++k) {
    const std::string key = "optimizer." + std::to_string(k) + ".exp_avg";
    for (int64_t t = 0; t < 8; ++t)
      for (int64_t d = 0; d < 8; ++d)
        osaved.push_back(Saved(Box(key, {1024, 1024}, {t * 128, 0}, {128, 1024},
                                   FlatRange{d * n8 / 8, (d + 1) * n8 / 8}, DType::kFloat32),
                               int(t), 1 << 14));
    for (int64_t t = 0; t < 4; ++t)
      for (int64_t d = 0; d < 16; ++d)
        oreqs.push_back(Box(key, {1024, 1024}, {t * 256, 0}, {256, 1024},
                            FlatRange{d * n4 / 16, (d + 1) * n4 / 16}, DType::kFloat32));
  }
  t0 = std::chrono::steady_clock::now();
  auto oplan = PlanReads(osaved, oreqs);
  const double opt_ms = Millis(t0);
  ASSERT_TRUE(oplan.ok()) << oplan.status().ToString();
  EXPECT_EQ(oplan->bytes_read, int64_t(kKeys) * 1024 * 1024 * 4);
  // One loading rank's plan: one request per key against every saved shard
  // (what each rank of a large job computes; dominated by the key index).
  std::vector<ShardedTensor> rank_reqs;
  for (size_t i = 0; i < oreqs.size(); i += 64) rank_reqs.push_back(oreqs[i + 17]);
  t0 = std::chrono::steady_clock::now();
  auto rplan = PlanReads(osaved, rank_reqs);
  const double rank_ms = Millis(t0);
  ASSERT_TRUE(rplan.ok()) << rplan.status().ToString();
  EXPECT_EQ(rplan->chunks_read, int64_t(kKeys));  // TP4/DP16 slices align with TP8/DP8 ones
  std::cout << "PlanReads one rank: " << rank_reqs.size() << " requests vs " << osaved.size()
            << " saved shards: " << rank_ms << " ms\n";
  std::cout << "PlanReads grid layout: " << kKeys << " keys x 64 saved x 64 requests, " << runs
            << " runs: " << grid_ms << " ms\n"
            << "PlanReads optimizer layout: " << kKeys
            << " keys x 64 saved x 64 requests: " << opt_ms << " ms\n";
  RecordProperty("grid_ms", std::to_string(grid_ms));
  RecordProperty("optimizer_ms", std::to_string(opt_ms));
  RecordProperty("one_rank_ms", std::to_string(rank_ms));
}

}  // namespace
}  // namespace ckpt::reshard
