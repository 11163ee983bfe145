// Expected values (any box, any flat range, vocab padding) and a cross-layout
// round trip of the GPT state through an in-test global store, including the
// naive-fc1 negative control.
#include "ckpt/workload/expected_values.h"

#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <set>

#include "reshard/megatron_gpt.h"
#include "ckpt/workload/gpt_local_state.h"
#include "harness/negative_controls.h"

namespace ckpt::reshard {
namespace {

using namespace ckpt::workload;  // owned test state and expected values
using testing::NaiveFc1Shards;

ShardedTensor Box(std::string key, DType dt, Shape global, Shape offset, Shape local) {
  ShardedTensor t;
  t.key = std::move(key);
  t.dtype = dt;
  t.global_shape = std::move(global);
  t.global_offset = std::move(offset);
  t.local_shape = std::move(local);
  return t;
}

std::vector<std::byte> Fill(const ShardedTensor& t, int64_t valid_rows = kNoPadding) {
  std::vector<std::byte> buf(size_t(t.num_bytes()));
  Status st = FillExpected(t, buf, valid_rows);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return buf;
}

TEST(ExpectedValuesTest, StableNonzeroVariedAndDistinctBetweenKeys) {
  std::set<double> values;
  int same_as_other_key = 0;
  for (int64_t i = 0; i < 4096; ++i) {
    double v = ExpectedValue("a.weight", i, DType::kFloat32);
    EXPECT_EQ(v, ExpectedValue("a.weight", i, DType::kFloat32));
    EXPECT_NE(v, 0.0);
    EXPECT_LE(std::abs(v), 2.0);
    values.insert(v);
    same_as_other_key += v == ExpectedValue("b.weight", i, DType::kFloat32);
  }
  EXPECT_GT(values.size(), 1000u);
  EXPECT_LT(same_as_other_key, 40);  // ~1/2304 expected by chance
}

TEST(ExpectedValuesTest, BitExactInEveryDType) {
  for (DType dt : kAllDTypes) {
    ShardedTensor t = Box("k", dt, {5, 7}, {0, 0}, {5, 7});
    std::vector<std::byte> buf = Fill(t);
    for (int64_t i = 0; i < 35; ++i)
      EXPECT_EQ(ElementAsDouble(dt, buf.data(), i), ExpectedValue("k", i, dt)) << DTypeName(dt);
    int64_t first = 7;
    EXPECT_EQ(*CountMismatches(t, buf, &first), 0);
    EXPECT_EQ(first, -1);
  }
}

TEST(ExpectedValuesTest, AnyBoxAndFlatRangeAgreesWithTheWholeTensor) {
  const Shape g = {6, 10, 7};
  std::vector<std::byte> whole = Fill(Box("t", DType::kFloat32, g, {0, 0, 0}, g));
  auto at = [&](int64_t a, int64_t b, int64_t c) {
    float f;
    std::memcpy(&f, whole.data() + 4 * ((a * 10 + b) * 7 + c), 4);
    return f;
  };
  ShardedTensor t = Box("t", DType::kFloat32, g, {2, 3, 1}, {3, 4, 5});
  for (auto range :
       {std::optional<FlatRange>{}, std::optional<FlatRange>{FlatRange{7, 53}},
        std::optional<FlatRange>{FlatRange{0, 1}}, std::optional<FlatRange>{FlatRange{20, 20}}}) {
    t.flat_range = range;
    std::vector<std::byte> part = Fill(t);
    const int64_t begin = range ? range->begin : 0;
    for (int64_t p = 0; p < t.num_elements(); ++p) {
      int64_t q = begin + p;
      float f;
      std::memcpy(&f, part.data() + 4 * p, 4);
      EXPECT_EQ(f, at(2 + q / 20, 3 + q / 5 % 4, 1 + q % 5)) << p;
    }
    if (t.num_elements() == 0) continue;
    part[4 * (t.num_elements() - 1)] ^= std::byte{1};
    int64_t first = -1;
    EXPECT_EQ(*CountMismatches(t, part, &first), 1);
    EXPECT_EQ(first, t.num_elements() - 1);
  }
  std::vector<std::byte> wrong(3);
  EXPECT_EQ(FillExpected(t, wrong).code(), Code::kInvalidArgument);
}

TEST(ExpectedValuesTest, PaddingRowsAreZeroAndRealRowsIgnoreThePadding) {
  ShardedTensor t = Box("emb", DType::kBFloat16, {1280, 8}, {1024, 0}, {256, 8});
  t.allow_shape_mismatch = true;
  std::vector<std::byte> buf = Fill(t, 1100);
  for (int64_t row = 0; row < 256; ++row)
    for (int64_t c = 0; c < 8; ++c) {
      double v = ElementAsDouble(t.dtype, buf.data(), row * 8 + c);
      if (1024 + row >= 1100)
        EXPECT_EQ(v, 0.0);
      else
        EXPECT_EQ(v, ExpectedValue("emb", (1024 + row) * 8 + c, t.dtype));
    }
  t.allow_shape_mismatch = false;  // padding applies only to allow_shape_mismatch tensors
  buf = Fill(t, 1100);
  EXPECT_NE(ElementAsDouble(t.dtype, buf.data(), 255 * 8), 0.0);
}

// ---- Cross-layout round trip through a global store ----

using Store = std::map<std::string, std::pair<Shape, std::vector<std::byte>>>;

// Calls f(pos, row-major index in `shape` or -1 if outside) per shard element.
template <typename F>
void Walk(const ShardedTensor& t, const Shape& shape, F f) {
  const int64_t b = t.flat_range ? t.flat_range->begin : 0;
  for (int64_t p = 0; p < t.num_elements(); ++p) {
    int64_t rest = b + p, g = 0, stride = 1;
    bool inside = true;
    for (size_t d = t.local_shape.size(); d-- > 0;) {
      int64_t i = t.global_offset[d] + rest % t.local_shape[d];
      rest /= t.local_shape[d];
      inside = inside && i < shape[d];
      g += i * stride;
      stride *= shape[d];
    }
    f(p, inside ? g : -1);
  }
}

GptConfig Tiny(bool stacked = false, bool tied = false) {
  GptConfig c = *GptPreset("tiny");
  c.stack_layers = stacked;
  c.tied_embeddings = tied;
  return c;
}

// Every rank of `pc` fills its true local parameters, then writes its main
// replicas as `save_shards` describes them (naive or correct) into the store.
Store Save(const GptConfig& cfg, const ParallelConfig& pc, bool naive) {
  Store store;
  for (int r = 0; r < pc.world_size(); ++r) {
    RankCoords c = *CoordsOf(pc, r);
    auto truth = *GptShards(cfg, pc, c);
    auto state = *GptLocalState::Create(naive ? *NaiveFc1Shards(cfg, pc, c) : truth);
    const size_t es = DTypeSize(cfg.dtype);
    for (const GptShard& g : truth)
      EXPECT_TRUE(FillExpected(g.tensor,
                               state.Param(g.param).subspan(size_t(g.param_offset) * es,
                                                            size_t(g.tensor.num_bytes())),
                               cfg.vocab_size)
                      .ok());
    for (size_t i = 0; i < state.shards().size(); ++i) {
      const ShardedTensor& t = state.shards()[i].tensor;
      if (!t.is_main_replica()) continue;
      auto& [shape, data] = store[t.key];
      if (data.empty()) shape = t.global_shape, data.resize(size_t(NumElements(shape)) * es);
      std::span<std::byte> src = state.ShardData(i);
      Walk(t, shape, [&](int64_t p, int64_t g) { std::memcpy(&data[g * es], &src[p * es], es); });
    }
  }
  return store;
}

// Loads every rank of `pc` from the store (overlap copied, extra padding zero)
// and returns the total mismatches against the expected values.
int64_t LoadAndCount(const Store& store, const GptConfig& cfg, const ParallelConfig& pc, bool naive,
                     std::string* first_bad) {
  int64_t bad = 0;
  for (int r = 0; r < pc.world_size(); ++r) {
    RankCoords c = *CoordsOf(pc, r);
    auto state =
        *GptLocalState::Create(naive ? *NaiveFc1Shards(cfg, pc, c) : *GptShards(cfg, pc, c));
    const size_t es = DTypeSize(cfg.dtype);
    for (size_t i = 0; i < state.shards().size(); ++i) {
      const ShardedTensor& t = state.shards()[i].tensor;
      const auto& [shape, data] = store.at(t.key);
      std::span<std::byte> dst = state.ShardData(i);
      Walk(t, shape, [&](int64_t p, int64_t g) {
        if (g >= 0)
          std::memcpy(&dst[p * es], &data[g * es], es);
        else
          std::memset(&dst[p * es], 0, es);
      });
    }
    // Check against the TRUE layout: a naive load lands values in the wrong rows.
    auto truth = *GptLocalState::Create(*GptShards(cfg, pc, c));
    for (size_t i = 0; i < truth.shards().size(); ++i) {
      const GptShard& g = truth.shards()[i];
      std::span<std::byte> p = state.Param(g.param);
      std::span<std::byte> src =
          p.subspan(size_t(g.param_offset) * es, size_t(g.tensor.num_bytes()));
      int64_t first = -1;
      int64_t n = *CountMismatches(g.tensor, src, &first, cfg.vocab_size);
      if (n > 0 && bad == 0 && first_bad) *first_bad = g.tensor.key;
      bad += n;
    }
  }
  return bad;
}

TEST(GptRoundTripTest, ReshardsAcrossTpPpVppAndVocabPadding) {
  struct Case {
    const char* from;
    const char* to;
    bool stacked, tied;
  };
  for (const Case& k :
       {Case{"tp=2", "tp=4", false, false}, Case{"tp=4", "tp=1", false, false},
        Case{"tp=8", "tp=2,pp=2,vpp=2", false, false}, Case{"tp=2,pp=2", "pp=4,dp=2", true, true},
        Case{"tp=1,pp=4,vpp=2", "tp=8", true, false},
        Case{"tp=2,dp=2,pp=2", "tp=4,pp=2", false, true}}) {
    GptConfig cfg = Tiny(k.stacked, k.tied);
    Store store = Save(cfg, *ParallelConfig::Parse(k.from), false);
    std::string first_bad;
    EXPECT_EQ(LoadAndCount(store, cfg, *ParallelConfig::Parse(k.to), false, &first_bad), 0)
        << k.from << " -> " << k.to << ": first bad " << first_bad;
  }
}

TEST(GptRoundTripTest, NaiveFc1ConcatBreaksOnlyWhenTpChanges) {
  GptConfig cfg = Tiny();
  Store store = Save(cfg, *ParallelConfig::Parse("tp=2"), true);
  std::string first_bad;
  EXPECT_EQ(LoadAndCount(store, cfg, *ParallelConfig::Parse("tp=2,pp=2"), true, &first_bad), 0);
  EXPECT_GT(LoadAndCount(store, cfg, *ParallelConfig::Parse("tp=4"), true, &first_bad), 0);
  EXPECT_NE(first_bad.find("mlp.linear_fc1.weight"), std::string::npos) << first_bad;
}

}  // namespace
}  // namespace ckpt::reshard
