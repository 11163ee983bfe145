// Errors that name the right culprit and leave nothing behind (issue 28.7):
// distinct keys get distinct HDF5 names (the escape is injective; files of
// the old escape still read), keys are bounded and quoted briefly in
// messages, and a save whose 'begin' broadcast fails drops its tmp dir.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "ckpt/base/key_bound.h"
#include "ckpt/format/manifest.h"
#include "ckpt/format/shard_file.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/verify.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;
namespace fs = std::filesystem;

SaveOptions Opts(const std::string& root, int64_t iteration) {
  SaveOptions o;
  o.root = root;
  o.iteration = iteration;
  o.write.chunk_bytes = 256;
  return o;
}

std::vector<std::string> TmpDirsUnder(const std::string& root) {
  std::vector<std::string> tmp;
  for (const auto& e : fs::directory_iterator(root))
    if (IsTmpIterDirName(e.path().filename().string())) tmp.push_back(e.path().filename().string());
  return tmp;
}

// Before: "a/b" and "a%2Fb" were both "/tensors/a%2Fb@0" and the save failed
// with AlreadyExists.
TEST(KeyEscapeTest, KeysThatLookEscapedDoNotCollide) {
  ShardedTensor slash = Desc("a/b", DType::kFloat32, {4}, {0}, {4});
  ShardedTensor lookalike = Desc("a%2Fb", DType::kFloat32, {4}, {0}, {4});
  EXPECT_EQ(TensorDatasetName(slash), "/tensors/a%2Fb@0");
  EXPECT_EQ(TensorDatasetName(lookalike), "/tensors/a%252Fb@0");
  EXPECT_EQ(ObjectDatasetName({"r%/s", {1}, {0}, {}}), "/objects/r%25%2Fs@0");

  const std::string root = testing::ScratchDir("key_escape");
  OwnedState s;
  s.Add(slash, true);
  s.Add(lookalike, true);
  s.Add(Desc("a%252Fb", DType::kInt32, {3}, {0}, {3}), true);
  s.AddObject({"o/1", {1}, {0}, {}}, "slash");
  s.AddObject({"o%2F1", {1}, {0}, {}}, "percent");
  auto saved = SaveCheckpoint(s.dict(), Opts(root, 1));
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();

  OwnedState back;
  back.Add(slash, false);
  back.Add(lookalike, false);
  back.Add(Desc("a%252Fb", DType::kInt32, {3}, {0}, {3}), false);
  back.AddObject({"o/1", {1}, {0}, {}}, "");
  back.AddObject({"o%2F1", {1}, {0}, {}}, "");
  LoadOptions lo;
  lo.root = root;
  auto loaded = LoadCheckpoint(back.dict(), lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(back.CountMismatches(), 0);
  auto text = [](const ObjectEntry& o) { return std::string(reinterpret_cast<const char*>(o.bytes.data()), o.bytes.size()); };
  EXPECT_EQ(text(back.dict().objects()[0]), "slash");
  EXPECT_EQ(text(back.dict().objects()[1]), "percent");
}

// tests/golden/v2_old_key_escape: saved by the writer before the escape
// covered '%' (keys "w/x" -> "/tensors/w%2Fx@0", "p%q" -> "/tensors/p%q@0").
// The manifest names each dataset, so it still loads and verifies.
TEST(KeyEscapeTest, CheckpointsOfTheOldEscapeStillLoad) {
  const std::string root = std::string(CKPT_SOURCE_DIR) + "/tests/golden/v2_old_key_escape";
  auto m = ReadManifest(DefaultEnv(), root, 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  std::set<std::string> names;
  for (const auto& sh : m->shards) names.insert(sh.record.dataset);
  EXPECT_EQ(names, (std::set<std::string>{"/tensors/w%2Fx@0", "/tensors/p%q@0"}));
  OwnedState back;
  back.Add(Desc("w/x", DType::kFloat32, {6}, {0}, {6}), false);
  back.Add(Desc("p%q", DType::kFloat32, {5}, {0}, {5}), false);
  LoadOptions lo;
  lo.root = root;
  auto loaded = LoadCheckpoint(back.dict(), lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  for (const auto& t : back.dict().tensors()) {  // saved as arange(n)
    const auto* v = reinterpret_cast<const float*>(t.data.data());
    for (int64_t i = 0; i < t.meta.num_elements(); ++i) EXPECT_EQ(v[i], float(i)) << t.meta.key << " " << i;
  }
  auto report = VerifyCheckpoint(DefaultEnv(), root, VerifyOptions{});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok());
}

// Before: a 1 MiB key was accepted by save and quoted whole (twice) in
// messages; a load asking for it quoted it whole in NotFound.
TEST(KeyBoundTest, OverlongKeysAreRefusedWithShortMessages) {
  const std::string root = testing::ScratchDir("key_bound");
  const std::string huge(size_t(1) << 20, 'k');
  {
    OwnedState s;
    s.Add(Desc(huge, DType::kFloat32, {2}, {0}, {2}), true);
    auto r = SaveCheckpoint(s.dict(), Opts(root, 1));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString().substr(0, 300);
    EXPECT_LT(r.status().ToString().size(), 1024u) << r.status().ToString().substr(0, 300);
    EXPECT_NE(r.status().message().find("1048576 bytes exceeds the maximum of 4096"), std::string::npos);
  }
  {
    OwnedState s;
    s.AddObject({huge, {1}, {0}, {}}, "x");
    auto r = SaveCheckpoint(s.dict(), Opts(root, 1));
    ASSERT_FALSE(r.ok());
    EXPECT_LT(r.status().ToString().size(), 1024u) << r.status().ToString().substr(0, 300);
  }
  // The longest key allowed saves and loads.
  const std::string longest(kMaxKeyBytes, 'm');
  OwnedState ok;
  ok.Add(Desc(longest, DType::kFloat32, {2}, {0}, {2}), true);
  auto saved = SaveCheckpoint(ok.dict(), Opts(root, 2));
  ASSERT_TRUE(saved.ok()) << saved.status().ToString().substr(0, 300);
  LoadOptions lo;
  lo.root = root;
  for (StrictMode strict : {StrictMode::kNone, StrictMode::kAll}) {
    OwnedState want;
    want.Add(Desc(huge, DType::kFloat32, {2}, {0}, {2}), false);
    lo.strict = strict;
    auto r = LoadCheckpoint(want.dict(), lo);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument) << r.status().ToString().substr(0, 300);
    EXPECT_LT(r.status().ToString().size(), 1024u) << r.status().ToString().substr(0, 300);
  }
  // A missing key just over the quoting limit is quoted briefly too.
  OwnedState missing;
  missing.Add(Desc(std::string(kMaxKeyBytes, 'n'), DType::kFloat32, {2}, {0}, {2}), false);
  lo.strict = StrictMode::kAll;
  auto r = LoadCheckpoint(missing.dict(), lo);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kNotFound) << r.status().ToString().substr(0, 300);
  EXPECT_LT(r.status().ToString().size(), 1024u) << r.status().ToString().substr(0, 300);
  EXPECT_NE(r.status().message().find("(4096 bytes)"), std::string::npos) << r.status().ToString().substr(0, 300);
}

// A two-rank comm whose rank 0 cannot deliver the 'begin' message (its peer
// never called save; a control plane that fails the send).
class BeginFails final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 2; }
  Result<std::vector<std::string>> Gather(const std::string&, int, Millis, Phase phase) override {
    return Status::Timeout("rank 0: no answer from rank(s) 1 in phase '" + std::string(PhaseName(phase)) + "'");
  }
  Result<std::string> Broadcast(const std::string&, int, Millis, Phase phase) override {
    return Status::Timeout("rank 0: message not taken by rank(s) 1 in phase '" + std::string(PhaseName(phase)) + "'");
  }
  Result<std::vector<std::string>> AllToAll(std::vector<std::string>, Millis, Phase) override {
    return Status::Internal("unused");
  }
};

// Before: rank 0 returned the broadcast's failure and left its prepared tmp
// dir (and its lease) behind until the next save cleaned it.
TEST(SaveCleanupTest, FailedBeginBroadcastRemovesTheTmpDir) {
  const std::string root = testing::ScratchDir("begin_fails");
  OwnedState s;
  s.Add(Desc("w", DType::kFloat32, {4}, {0}, {4}), true);
  BeginFails comm;
  SaveOptions o = Opts(root, 1);
  o.comm = &comm;
  o.timeout = Millis(100);
  auto r = SaveCheckpoint(s.dict(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kTimeout) << r.status().ToString();
  EXPECT_NE(r.status().message().find("rank(s) 1"), std::string::npos) << r.status().ToString();
  EXPECT_EQ(TmpDirsUnder(root), std::vector<std::string>{});
}

}  // namespace
}  // namespace ckpt
