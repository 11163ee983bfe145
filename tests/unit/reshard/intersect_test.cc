// Tests for reshard/geometry/intersect.h: exact runs on hand-computed cases, a
// brute-force cross-check against an element-by-element reference, large
// Megatron-shaped cases, and CheckCoverage errors.
#include "reshard/geometry/intersect.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>

namespace ckpt::reshard {
namespace {

using Runs = std::vector<CopyRun>;

ShardedTensor Box(Shape global, Shape offset, Shape local,
                  std::optional<FlatRange> flat = std::nullopt) {
  ShardedTensor t;
  t.key = "w";
  t.global_shape = std::move(global);
  t.global_offset = std::move(offset);
  t.local_shape = std::move(local);
  t.flat_range = flat;
  return t;
}

// ---- Hand-computed cases ----------------------------------------------------

TEST(IntersectTest, Tp4ToTp2OnAxis0IsOneRun) {
  // global [8, 4]; TP4 rank 1 holds rows [2, 4); TP2 rank 0 holds rows [0, 4).
  ShardedTensor saved = Box({8, 4}, {2, 0}, {2, 4});
  ShardedTensor req = Box({8, 4}, {0, 0}, {4, 4});
  EXPECT_EQ(Intersect(saved, req), (Runs{{0, 8, 8}}));
  EXPECT_EQ(OverlapCount(saved, req), 8);
  // TP4 rank 2 -> TP2 rank 1.
  EXPECT_EQ(Intersect(Box({8, 4}, {4, 0}, {2, 4}), Box({8, 4}, {4, 0}, {4, 4})), (Runs{{0, 0, 8}}));
  // TP4 rank 2 does not meet TP2 rank 0.
  EXPECT_TRUE(Intersect(Box({8, 4}, {4, 0}, {2, 4}), req).empty());
  EXPECT_EQ(OverlapCount(Box({8, 4}, {4, 0}, {2, 4}), req), 0);
}

TEST(IntersectTest, Tp4ToTp2OnAxis1IsOneRunPerRow) {
  // global [3, 8]; TP4 rank 1 holds cols [2, 4); TP2 rank 0 holds cols [0, 4).
  ShardedTensor saved = Box({3, 8}, {0, 2}, {3, 2});
  ShardedTensor req = Box({3, 8}, {0, 0}, {3, 4});
  EXPECT_EQ(Intersect(saved, req), (Runs{{0, 2, 2}, {2, 6, 2}, {4, 10, 2}}));
  // Reverse direction: TP2 rank 1 (cols [4, 8)) -> TP4 rank 3 (cols [6, 8)).
  EXPECT_EQ(Intersect(Box({3, 8}, {0, 4}, {3, 4}), Box({3, 8}, {0, 6}, {3, 2})),
            (Runs{{2, 0, 2}, {6, 2, 2}, {10, 4, 2}}));
}

TEST(IntersectTest, ThreeDimensional) {
  // Intersection [1,2) x [2,4) x [0,3): saved strides (12,3,1), requested (12,6,1).
  EXPECT_EQ(Intersect(Box({2, 4, 6}, {0, 0, 0}, {2, 4, 3}), Box({2, 4, 6}, {1, 2, 0}, {1, 2, 6})),
            (Runs{{18, 0, 3}, {21, 6, 3}}));
  // Trailing dims [*, 2 of 2, 6 of 6] contiguous in both: one run of 12.
  EXPECT_EQ(Intersect(Box({2, 4, 6}, {0, 1, 0}, {2, 2, 6}), Box({2, 4, 6}, {1, 0, 0}, {1, 4, 6})),
            (Runs{{12, 6, 12}}));
}

TEST(IntersectTest, FlatRangeCrossingRows) {
  // Saved holds linear [3, 10) of the whole [4, 4]; requested rows 1..2.
  ShardedTensor saved = Box({4, 4}, {0, 0}, {4, 4}, FlatRange{3, 10});
  EXPECT_EQ(Intersect(saved, Box({4, 4}, {1, 0}, {2, 4})), (Runs{{1, 0, 6}}));
  // Saved holds linear [6, 13); requested cols 2..3 of every row.
  saved.flat_range = FlatRange{6, 13};
  ShardedTensor cols = Box({4, 4}, {0, 2}, {4, 2});
  EXPECT_EQ(Intersect(saved, cols), (Runs{{0, 2, 2}, {4, 4, 2}}));
  EXPECT_EQ(OverlapCount(saved, cols), 4);
  // The requested side may be the flat one too.
  EXPECT_EQ(Intersect(cols, saved), (Runs{{2, 0, 2}, {4, 4, 2}}));
}

TEST(IntersectTest, FlatRangeAgainstFlatRange) {
  // Saved rows [0,4) flat [5,13); requested rows [2,6) flat [2,9): they share
  // global (2,2), (2,3), (3,0) = saved flat 5..7, requested flat 0..2.
  ShardedTensor saved = Box({8, 4}, {0, 0}, {4, 4}, FlatRange{5, 13});
  ShardedTensor req = Box({8, 4}, {2, 0}, {4, 4}, FlatRange{2, 9});
  EXPECT_EQ(Intersect(saved, req), (Runs{{5, 0, 3}}));
  EXPECT_EQ(OverlapCount(saved, req), 3);
  req.flat_range = FlatRange{5, 9};  // starts after the saved range ends
  EXPECT_TRUE(Intersect(saved, req).empty());
  EXPECT_EQ(OverlapCount(saved, req), 0);
}

TEST(IntersectTest, RankZeroAndDegenerateShapes) {
  EXPECT_EQ(Intersect(Box({}, {}, {}), Box({}, {}, {})), (Runs{{0, 0, 1}}));
  EXPECT_EQ(OverlapCount(Box({}, {}, {}), Box({}, {}, {})), 1);
  EXPECT_TRUE(Intersect(Box({}, {}, {}, FlatRange{0, 0}), Box({}, {}, {})).empty());
  EXPECT_TRUE(Intersect(Box({4}, {0}, {0}), Box({4}, {0}, {4})).empty());  // zero-sized box
  EXPECT_EQ(OverlapCount(Box({4}, {0}, {0}), Box({4}, {0}, {4})), 0);
  EXPECT_TRUE(Intersect(Box({4}, {0}, {4}), Box({4, 1}, {0, 0}, {4, 1})).empty());  // rank
  EXPECT_TRUE(Intersect(Box({4}, {0}, {2}), Box({4}, {2}, {2})).empty());           // touching only
}

// ---- Brute-force cross-check -------------------------------------------------

struct Pair {
  int64_t src, dst;
  bool operator<(const Pair& o) const { return src < o.src || (src == o.src && dst < o.dst); }
  bool operator==(const Pair&) const = default;
};

// Flat position of global point p in shard t, or -1 if t does not hold it.
int64_t FlatPos(const ShardedTensor& t, const Shape& p) {
  int64_t lin = 0;
  for (size_t d = 0; d < p.size(); ++d) {
    int64_t rel = p[d] - t.global_offset[d];
    if (rel < 0 || rel >= t.local_shape[d]) return -1;
    lin = lin * t.local_shape[d] + rel;
  }
  if (!t.flat_range) return lin;
  if (lin < t.flat_range->begin || lin >= t.flat_range->end) return -1;
  return lin - t.flat_range->begin;
}

std::vector<Pair> Reference(const ShardedTensor& s, const ShardedTensor& r) {
  std::vector<Pair> out;
  const Shape& g = s.global_shape;
  Shape p(g.size());
  for (int64_t i = 0, n = NumElements(g); i < n; ++i) {
    for (int64_t rest = i, d = int64_t(g.size()); d-- > 0;) {
      p[size_t(d)] = rest % g[size_t(d)];
      rest /= g[size_t(d)];
    }
    int64_t a = FlatPos(s, p), b = FlatPos(r, p);
    if (a >= 0 && b >= 0) out.push_back({a, b});
  }
  std::sort(out.begin(), out.end());
  return out;
}

ShardedTensor RandomShard(std::mt19937& rng, const Shape& g) {
  auto uni = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  Shape off(g.size()), ext(g.size());
  for (size_t d = 0; d < g.size(); ++d) {
    if (uni(0, 2) == 0) {  // full axes, as in TP splits, make trailing blocks contiguous
      ext[d] = g[d];
      continue;
    }
    off[d] = uni(0, g[d] - 1);
    ext[d] = uni(0, 9) ? uni(1, g[d] - off[d]) : 0;  // a few zero-sized boxes
  }
  std::optional<FlatRange> flat;
  const int64_t n = NumElements(ext);
  if (uni(0, 1)) {
    int64_t b = uni(0, n), e = uni(b, n);
    flat = FlatRange{b, e};
  }
  return Box(g, off, ext, flat);
}

TEST(IntersectTest, MatchesBruteForceOnRandomShards) {
  std::mt19937 rng(1234);
  int nonempty = 0, multi_run = 0, flat_both = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    Shape g(size_t(std::uniform_int_distribution<int>(0, 4)(rng)));
    for (auto& d : g) d = std::uniform_int_distribution<int64_t>(1, 6)(rng);
    ShardedTensor s = RandomShard(rng, g), r = RandomShard(rng, g);
    const Runs runs = Intersect(s, r);
    std::vector<Pair> got;
    int64_t total = 0;
    for (size_t i = 0; i < runs.size(); ++i) {
      ASSERT_GT(runs[i].len, 0);
      if (i > 0) {
        const CopyRun& p = runs[i - 1];
        ASSERT_LT(p.src + p.len, runs[i].src + 1) << "runs not sorted by src";
        ASSERT_FALSE(p.src + p.len == runs[i].src && p.dst + p.len == runs[i].dst)
            << "mergeable runs left unmerged";
      }
      for (int64_t k = 0; k < runs[i].len; ++k) got.push_back({runs[i].src + k, runs[i].dst + k});
      total += runs[i].len;
    }
    const std::vector<Pair> want = Reference(s, r);
    ASSERT_EQ(got, want) << "saved " << s.DebugString() << " requested " << r.DebugString();
    ASSERT_EQ(OverlapCount(s, r), total);
    nonempty += !want.empty();
    multi_run += runs.size() > 1;
    flat_both += !want.empty() && s.flat_range && r.flat_range;
  }
  // The generator exercises real overlaps, split rows and flat-vs-flat clipping.
  EXPECT_GT(nonempty, 3000);
  EXPECT_GT(multi_run, 400);
  EXPECT_GT(flat_both, 150);
}

// ---- Megatron-sized cases -----------------------------------------------------

TEST(IntersectTest, EmbeddingTp8ToTp2) {
  const int64_t V = 50304, H = 4096, rows8 = V / 8, rows2 = V / 2;
  for (int64_t r2 = 0; r2 < 2; ++r2) {
    ShardedTensor req = Box({V, H}, {r2 * rows2, 0}, {rows2, H});
    int64_t total = 0;
    for (int64_t r8 = 0; r8 < 8; ++r8) {
      Runs runs = Intersect(Box({V, H}, {r8 * rows8, 0}, {rows8, H}), req);
      if (r8 / 4 != r2) {
        EXPECT_TRUE(runs.empty());
        continue;
      }
      EXPECT_EQ(runs, (Runs{{0, (r8 % 4) * rows8 * H, rows8 * H}}));
      total += runs[0].len;
    }
    EXPECT_EQ(total, rows2 * H);
  }
}

TEST(IntersectTest, OptimizerFlatRangesAcrossTpBoxes) {
  // Saved: TP8 boxes split by DP4 flat ranges; requested: TP2 boxes split by
  // DP16 flat ranges. With full rows each shard is one interval of the global
  // linear order, so the expected run is an interval intersection.
  const int64_t V = 50304, H = 4096, rows8 = V / 8, rows2 = V / 2;
  const int64_t n8 = rows8 * H, n2 = rows2 * H;
  int64_t total = 0;
  for (int64_t t8 = 0; t8 < 8; ++t8)
    for (int64_t d4 = 0; d4 < 4; ++d4) {
      ShardedTensor s =
          Box({V, H}, {t8 * rows8, 0}, {rows8, H}, FlatRange{d4 * n8 / 4, (d4 + 1) * n8 / 4});
      const int64_t s_lo = t8 * n8 + s.flat_range->begin, s_hi = t8 * n8 + s.flat_range->end;
      for (int64_t t2 = 0; t2 < 2; ++t2)
        for (int64_t d16 = 0; d16 < 16; ++d16) {
          ShardedTensor r = Box({V, H}, {t2 * rows2, 0}, {rows2, H},
                                FlatRange{d16 * n2 / 16, (d16 + 1) * n2 / 16});
          const int64_t r_lo = t2 * n2 + r.flat_range->begin, r_hi = t2 * n2 + r.flat_range->end;
          const int64_t lo = std::max(s_lo, r_lo), hi = std::min(s_hi, r_hi);
          Runs want;
          if (lo < hi) want.push_back({lo - s_lo, lo - r_lo, hi - lo});
          ASSERT_EQ(Intersect(s, r), want) << s.DebugString() << " vs " << r.DebugString();
          total += OverlapCount(s, r);
        }
    }
  EXPECT_EQ(total, V * H);
}

TEST(IntersectTest, RowParallelFlatRangesSkipRowsOutsideTheRange) {
  // [4096 x 50304] split on axis 1: each intersection row is its own run.
  // A small flat range must cost only the rows it touches (not all 4096).
  const int64_t R = 4096, C = 50304, c8 = C / 8, c2 = C / 2;
  ShardedTensor s = Box({R, C}, {0, c8}, {R, c8}, FlatRange{10 * c8 + 5, 13 * c8 + 7});
  ShardedTensor r = Box({R, C}, {0, 0}, {R, c2});
  Runs runs = Intersect(s, r);
  ASSERT_EQ(runs.size(), 4u);  // partial row 10, rows 11 and 12, partial row 13
  EXPECT_EQ(runs.front(), (CopyRun{0, 10 * c2 + c8 + 5, c8 - 5}));
  EXPECT_EQ(runs.back(), (CopyRun{3 * c8 - 5, 13 * c2 + c8, 7}));
  EXPECT_EQ(OverlapCount(s, r), 3 * c8 + 2);
  // Without flat ranges: one run per row, all rows.
  s.flat_range.reset();
  EXPECT_EQ(Intersect(s, r).size(), size_t(R));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 1000; ++i) {
    s.flat_range = FlatRange{int64_t(i) * c8, int64_t(i) * c8 + 10};
    ASSERT_EQ(OverlapCount(s, r), 10);
  }
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 500.0) << "flat-range clipping should not walk every row";
}

// ---- CheckCoverage -----------------------------------------------------------

std::vector<ShardedTensor> SplitAxis0(const Shape& g, int parts) {
  std::vector<ShardedTensor> out;
  const int64_t rows = g[0] / parts;
  for (int p = 0; p < parts; ++p) {
    Shape off(g.size(), 0), ext = g;
    off[0] = p * rows;
    ext[0] = rows;
    out.push_back(Box(g, off, ext));
  }
  return out;
}

void ExpectCorruption(const Status& st, const std::vector<std::string>& parts) {
  ASSERT_EQ(st.code(), Code::kCorruption) << st.ToString();
  EXPECT_NE(st.message().find("'w'"), std::string::npos) << st.message();
  for (const auto& p : parts) EXPECT_NE(st.message().find(p), std::string::npos) << st.message();
}

TEST(CheckCoverageTest, AcceptsExactCovers) {
  EXPECT_TRUE(CheckCoverage("w", {8, 4}, SplitAxis0({8, 4}, 4)).ok());
  // 2 x 2 grid.
  EXPECT_TRUE(CheckCoverage("w", {4, 4},
                            {Box({4, 4}, {0, 0}, {2, 2}), Box({4, 4}, {0, 2}, {2, 2}),
                             Box({4, 4}, {2, 0}, {2, 2}), Box({4, 4}, {2, 2}, {2, 2})})
                  .ok());
  // Distributed-optimizer flat ranges of two TP boxes, in shuffled order.
  EXPECT_TRUE(
      CheckCoverage("w", {4, 4},
                    {Box({4, 4}, {0, 0}, {2, 4}, FlatRange{3, 8}), Box({4, 4}, {2, 0}, {2, 4}),
                     Box({4, 4}, {0, 0}, {2, 4}, FlatRange{0, 3})})
          .ok());
  // Intersecting boxes whose flat ranges keep the shared elements apart.
  EXPECT_TRUE(
      CheckCoverage("w", {2, 4},
                    {Box({2, 4}, {0, 0}, {2, 4}, FlatRange{0, 4}), Box({2, 4}, {1, 0}, {1, 4})})
          .ok());
  EXPECT_TRUE(CheckCoverage("w", {}, {Box({}, {}, {})}).ok());
  // Empty shards are ignored.
  EXPECT_TRUE(
      CheckCoverage("w", {2},
                    {Box({2}, {0}, {2}), Box({2}, {1}, {0}), Box({2}, {0}, {2}, FlatRange{1, 1})})
          .ok());
}

TEST(CheckCoverageTest, ReportsGapWithSizeAndIndex) {
  auto shards = SplitAxis0({8, 4}, 4);
  shards.erase(shards.begin() + 2);  // rows [4, 6) missing
  ExpectCorruption(CheckCoverage("w", {8, 4}, shards), {"8 of 32", "uncovered", "[4, 0]"});
  // A hole inside a box's flat ranges.
  ExpectCorruption(CheckCoverage("w", {2, 4},
                                 {Box({2, 4}, {0, 0}, {2, 4}, FlatRange{0, 5}),
                                  Box({2, 4}, {0, 0}, {2, 4}, FlatRange{6, 8})}),
                   {"1 of 8", "[1, 1]"});
  ExpectCorruption(CheckCoverage("w", {}, {}), {"1 of 1"});
  // A gap between 2-D blocks.
  ExpectCorruption(
      CheckCoverage("w", {4, 4}, {Box({4, 4}, {0, 0}, {4, 2}), Box({4, 4}, {0, 2}, {2, 2})}),
      {"4 of 16", "[2, 2]"});
}

TEST(CheckCoverageTest, ReportsOverlapNamingBothShards) {
  auto shards = SplitAxis0({8, 4}, 4);
  shards.push_back(shards[1]);  // duplicate box
  ExpectCorruption(CheckCoverage("w", {8, 4}, shards), {"overlap in 8 elements", "offset=[2, 0]"});
  // Overlapping flat ranges of one box.
  ExpectCorruption(CheckCoverage("w", {2, 4},
                                 {Box({2, 4}, {0, 0}, {2, 4}, FlatRange{0, 5}),
                                  Box({2, 4}, {0, 0}, {2, 4}, FlatRange{3, 8})}),
                   {"overlap in 2 elements", "flat=[0,5)", "flat=[3,8)"});
  // Distinct boxes that intersect.
  ExpectCorruption(
      CheckCoverage("w", {4, 4}, {Box({4, 4}, {0, 0}, {3, 4}), Box({4, 4}, {2, 0}, {2, 4})}),
      {"overlap in 4 elements", "offset=[0, 0]", "offset=[2, 0]"});
  // Intersecting boxes whose flat ranges collide in one element.
  ExpectCorruption(
      CheckCoverage("w", {2, 4},
                    {Box({2, 4}, {0, 0}, {2, 4}, FlatRange{0, 5}), Box({2, 4}, {1, 0}, {1, 4})}),
      {"overlap in 1 elements"});
}

TEST(CheckCoverageTest, RejectsOutOfBoundsAndWrongRank) {
  ExpectCorruption(CheckCoverage("w", {8, 4}, {Box({8, 4}, {6, 0}, {4, 4})}),
                   {"outside", "axis 0"});
  ExpectCorruption(CheckCoverage("w", {8, 4}, {Box({8}, {0}, {8})}), {"wrong rank"});
  ExpectCorruption(CheckCoverage("w", {8, 4}, {Box({8, 4}, {0, 0}, {8, 4}, FlatRange{0, 33})}),
                   {"flat range"});
  ExpectCorruption(CheckCoverage("w", {8, 4}, {Box({8, 5}, {0, 0}, {8, 4})}), {"global shape"});
}

TEST(CheckCoverageTest, ScalesToThousandsOfShards) {
  auto t0 = std::chrono::steady_clock::now();
  // 4096 TP boxes along axis 0, and 64 boxes x 64 flat ranges each.
  EXPECT_TRUE(CheckCoverage("w", {4096 * 4, 8}, SplitAxis0({4096 * 4, 8}, 4096)).ok());
  std::vector<ShardedTensor> dp;
  for (int b = 0; b < 64; ++b)
    for (int f = 0; f < 64; ++f)
      dp.push_back(
          Box({64 * 16, 1024}, {b * 16, 0}, {16, 1024}, FlatRange{f * 256, (f + 1) * 256}));
  EXPECT_TRUE(CheckCoverage("w", {64 * 16, 1024}, dp).ok());
  // Axis-1 split of 4096 shards: the sweep picks axis 1.
  std::vector<ShardedTensor> cols;
  for (int c = 0; c < 4096; ++c) cols.push_back(Box({8, 4096 * 2}, {0, c * 2}, {8, 2}));
  EXPECT_TRUE(CheckCoverage("w", {8, 4096 * 2}, cols).ok());
  cols.erase(cols.begin() + 1000);
  ExpectCorruption(CheckCoverage("w", {8, 4096 * 2}, cols), {"16 of 65536", "[0, 2000]"});
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(ms, 2000.0);
}

}  // namespace
}  // namespace ckpt::reshard
