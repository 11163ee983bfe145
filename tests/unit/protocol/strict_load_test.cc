// Strict key handling at load (LoadOptions::strict): missing and unexpected
// keys reported in LoadStats, or failing the load, single process and with
// threads as ranks (unexpected = requested by no rank).
#include <gtest/gtest.h>

#include <thread>

#include "ckpt/protocol/checkpoint.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;

std::string Layer(int i) { return "layers." + std::to_string(i) + ".w"; }

// Layers [first, last) of a model, one [8, 4] fp32 tensor each, and an "args" object.
void AddLayers(OwnedState& s, int first, int last, bool fill) {
  for (int i = first; i < last; ++i) s.Add(Desc(Layer(i), DType::kFloat32, {8, 4}, {0, 0}, {8, 4}), fill);
}

std::string SaveLayers(const std::string& name, int layers) {
  const std::string root = testing::ScratchDir(name);
  OwnedState s;
  AddLayers(s, 0, layers, true);
  s.AddObject({"args", {1}, {0}, {}}, "args-blob");
  SaveOptions o;
  o.root = root;
  o.iteration = 5;
  EXPECT_TRUE(SaveCheckpoint(s.dict(), o).ok());
  return root;
}

// Mismatches of zero-filled layers [first, last) against the pattern.
int64_t ZeroMismatches(int first, int last) {
  OwnedState z;
  AddLayers(z, first, last, false);
  return z.CountMismatches();
}

Result<LoadStats> Load(OwnedState& s, const std::string& root, StrictMode mode, Comm* comm = nullptr) {
  LoadOptions lo;
  lo.root = root;
  lo.strict = mode;
  lo.comm = comm;
  return LoadCheckpoint(s.dict(), lo);
}

TEST(StrictLoadTest, ModeNamesRoundTrip) {
  for (auto m : {StrictMode::kNone, StrictMode::kUnexpected, StrictMode::kMissing, StrictMode::kAll})
    EXPECT_EQ(*ParseStrictMode(StrictModeName(m)), m);
  EXPECT_EQ(ParseStrictMode("raise").status().code(), Code::kInvalidArgument);
}

// An 8-layer checkpoint loaded as a 4-layer model: reported always, fatal
// when strict covers unexpected keys.
TEST(StrictLoadTest, EightLayersLoadedAsFour) {
  const std::string root = SaveLayers("strict8", 8);
  for (auto mode : {StrictMode::kNone, StrictMode::kMissing, StrictMode::kUnexpected, StrictMode::kAll}) {
    OwnedState d;
    AddLayers(d, 0, 4, false);
    d.AddObject({"args", {1}, {0}, {}}, "");
    auto r = Load(d, root, mode);
    if (mode == StrictMode::kUnexpected || mode == StrictMode::kAll) {
      ASSERT_FALSE(r.ok()) << StrictModeName(mode);
      EXPECT_EQ(r.status().code(), Code::kFailedPrecondition);
      EXPECT_NE(r.status().message().find("4 key(s) no rank requested"), std::string::npos) << r.status().ToString();
      EXPECT_NE(r.status().message().find("'layers.4.w'"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(r.ok()) << StrictModeName(mode) << ": " << r.status().ToString();
    EXPECT_EQ(d.CountMismatches(), 0);
    EXPECT_EQ(r->unexpected_keys, (std::vector<std::string>{Layer(4), Layer(5), Layer(6), Layer(7)}));
    EXPECT_TRUE(r->missing_keys.empty());
  }
  OwnedState all;  // control: the whole model is not refused
  AddLayers(all, 0, 8, false);
  all.AddObject({"args", {1}, {0}, {}}, "");
  auto r = Load(all, root, StrictMode::kAll);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->unexpected_keys.empty());
  EXPECT_EQ(all.CountMismatches(), 0);
}

// A 4-layer checkpoint loaded as 6 layers plus an object it lacks.
TEST(StrictLoadTest, MissingKeysFailOrAreSkipped) {
  const std::string root = SaveLayers("strict4", 4);
  for (auto mode : {StrictMode::kMissing, StrictMode::kAll, StrictMode::kNone, StrictMode::kUnexpected}) {
    OwnedState d;
    AddLayers(d, 0, 6, false);
    d.AddObject({"args", {1}, {0}, {}}, "");
    d.AddObject({"rng", {1}, {0}, {}}, "untouched");
    auto r = Load(d, root, mode);
    if (mode == StrictMode::kMissing || mode == StrictMode::kAll) {
      ASSERT_FALSE(r.ok());
      EXPECT_EQ(r.status().code(), Code::kNotFound);
      for (const char* want : {"3 requested key(s) missing", "tensor 'layers.4.w' is not in checkpoint iteration 5",
                               "object 'rng' cell 0 is not in checkpoint"})
        EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().ToString();
      // Refused before any read: every buffer stays as it was (zeros).
      EXPECT_EQ(d.CountMismatches(), ZeroMismatches(0, 6));
      continue;
    }
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->missing_keys, (std::vector<std::string>{Layer(4), Layer(5), "rng"}));
    EXPECT_TRUE(r->unexpected_keys.empty());
    EXPECT_EQ(d.CountMismatches(), ZeroMismatches(4, 6));  // layers 4, 5 untouched (zeros), 0..3 loaded
    const auto& objs = d.dict().objects();
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(objs[0].bytes.data()), objs[0].bytes.size()), "args-blob");
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(objs[1].bytes.data()), objs[1].bytes.size()), "untouched");
  }
}

// Two thread-ranks as pipeline stages: each requests half of the layers, so
// nothing is unexpected; when neither requests layer 3, both ranks name it.
TEST(StrictLoadTest, UnexpectedIsRequestedByNoRank) {
  const std::string root = SaveLayers("strict_ranks", 4);
  for (int last : {4, 3}) {
    auto comms = MakeThreadComms(2);
    std::vector<Result<LoadStats>> out(2, Status::Internal("not run"));
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        OwnedState d;
        AddLayers(d, r * 2, std::min(last, r * 2 + 2), false);
        if (r == 0) d.AddObject({"args", {1}, {0}, {}}, "");
        out[r] = Load(d, root, last == 4 ? StrictMode::kAll : StrictMode::kMissing, comms[r].get());
        if (out[r].ok()) {
          EXPECT_EQ(d.CountMismatches(), 0);
        }
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 2; ++r) {
      ASSERT_TRUE(out[r].ok()) << out[r].status().ToString();
      const std::vector<std::string> want = last == 4 ? std::vector<std::string>{} : std::vector<std::string>{Layer(3)};
      EXPECT_EQ(out[r]->unexpected_keys, want) << r;
    }
  }
}

}  // namespace
}  // namespace ckpt
