// Retention (ckpt/protocol/retention.h): which iterations the policy deletes,
// that it deletes them only once the newest is the durable latest, and that a
// deleted iteration is gone as a whole (no half-deleted iter_N left behind).
#include <gtest/gtest.h>

#include <filesystem>

#include "ckpt/format/manifest.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/retention.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;
namespace fs = std::filesystem;
using V = std::vector<int64_t>;

TEST(RetentionVictims, KeepsMultiplesOfTheIntervalAndTheNewest) {
  // Megatron-LM --save-retain-interval 4 with saves every 2: 2 and 6 go, 4 and 8 stay, 10 is the newest.
  EXPECT_EQ(RetentionVictims({2, 4, 6, 8, 10}, 10, {.keep_every = 4}), (V{2, 6}));
  EXPECT_EQ(RetentionVictims({2, 4, 6, 8, 10}, 10, {.keep_last = 2}), (V{2, 4, 6}));
  EXPECT_EQ(RetentionVictims({2, 4, 6, 8, 10}, 10, {.keep_last = 2, .keep_every = 4}), (V{2, 6}));
  EXPECT_EQ(RetentionVictims({2, 4, 6, 8, 10}, 10, {.keep_last = 1}), (V{2, 4, 6, 8}));
}

TEST(RetentionVictims, NeverTheNewestNorAnythingNewerNorWhenOff) {
  EXPECT_EQ(RetentionVictims({2, 4, 6}, 4, {.keep_last = 1}), (V{2}));  // 6 is newer than the save: untouched
  EXPECT_TRUE(RetentionVictims({2, 4, 6}, 6, {}).empty());
  EXPECT_TRUE(RetentionVictims({6}, 6, {.keep_last = 1}).empty());
  EXPECT_FALSE(ValidateRetention({.keep_last = -1}).ok());
}

Status Save(const std::string& root, int64_t iteration) {
  OwnedState s;
  s.Add(Desc("w", DType::kFloat32, {64}, {0}, {64}), true);
  SaveOptions o;
  o.root = root;
  o.iteration = iteration;
  return SaveCheckpoint(s.dict(), o).status();
}

TEST(ApplyRetention, DeletesWholeIterationsAfterTheNewestIsLatest) {
  const std::string root = testing::ScratchDir("retention_apply");
  for (int64_t it : {2, 4, 6, 8}) ASSERT_TRUE(Save(root, it).ok());
  auto r = ApplyRetention(nullptr, root, 8, {.keep_every = 4});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->deleted, (V{2, 6}));
  EXPECT_EQ(r->kept, (V{4, 8}));
  for (const auto& e : fs::directory_iterator(root))  // no retired tmp dir left behind
    EXPECT_FALSE(IsTmpIterDirName(e.path().filename().string())) << e.path();
}

TEST(ApplyRetention, RefusesWhenTheNewIterationIsNotTheDurableLatest) {
  const std::string root = testing::ScratchDir("retention_not_latest");
  for (int64_t it : {2, 4}) ASSERT_TRUE(Save(root, it).ok());
  // The caller claims 6 was saved, but the tracker still names 4 (the save failed or lags).
  auto r = ApplyRetention(nullptr, root, 6, {.keep_last = 1});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kFailedPrecondition) << r.status().ToString();
  auto left = ListIterations(DefaultEnv(), root);
  ASSERT_TRUE(left.ok());
  EXPECT_EQ(*left, (V{2, 4}));
}

}  // namespace
}  // namespace ckpt
