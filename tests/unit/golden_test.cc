// Golden files pin the on-disk format (docs/FORMAT.md): the committed
// checkpoints of every format version (tests/golden/v1, v2) must keep loading
// and verifying with the same values, and saving the same state again must
// reproduce the current version's manifests byte for byte.
// After a format_version bump, write the new version's directory with
// CKPT_UPDATE_GOLDEN=1 golden_test (and add it to kGoldenDirs).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/verify.h"
#include "support/state_util.h"
#include "support/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;
namespace fs = std::filesystem;

const std::string kGoldenRoot = std::string(CKPT_SOURCE_DIR) + "/tests/golden/";
const std::string kGolden = kGoldenRoot + "v" + std::to_string(kFormatVersion);
const std::vector<std::string> kGoldenDirs = {kGoldenRoot + "v1", kGoldenRoot + "v2"};

void BuildGoldenState(OwnedState& s, bool fill) {
  s.Add(Desc("embedding.word_embeddings.weight", DType::kBFloat16, {40, 16}, {0, 0}, {40, 16}), fill);
  s.Add(Desc("decoder.layers.0.mlp.linear_fc2.weight", DType::kFloat32, {16, 24}, {0, 0}, {16, 24}), fill);
  for (FlatRange r : {FlatRange{0, 10}, FlatRange{10, 300}, FlatRange{300, 384}})
    s.Add(Desc("optimizer.exp_avg", DType::kFloat32, {16, 24}, {0, 0}, {16, 24}, {}, r), fill);
  s.Add(Desc("step", DType::kInt64, {}, {}, {}), fill);
  s.AddObject({"rng", {1}, {0}, {}}, "golden-rng-state");
}

SaveOptions GoldenOptions(const std::string& root, Compression c) {
  SaveOptions o;
  o.root = root;
  o.iteration = c == Compression::kNone ? 1 : 2;
  o.write.codec.compression = c;
  o.write.chunk_bytes = 512;
  // The v1 files were encoded with zstd's own level-1 parameters (its own
  // literal mode). The zstd
  // parameters are encoder tuning, not format (any setting is a standard frame,
  // GoldenCheckpointsLoadAndVerify and h5py_compat_test read them), but they
  // change the stored bytes and hence the chunk hashes in the manifest.
  o.write.codec.zstd_level = 1;
  o.write.codec.zstd_hash_log = 0;
  o.write.codec.zstd_huffman_literals = false;
  o.layout = {{"tp", 1}, {"pp", 1}, {"dp", 1}, {"world", 1}};
  o.metadata = {{"purpose", "golden"}};
  return o;
}

TEST(GoldenTest, SavingTheSameStateReproducesTheGoldenManifests) {
  const bool update = std::getenv("CKPT_UPDATE_GOLDEN") != nullptr;
  const std::string root = update ? kGolden : testing::ScratchDir("golden");
  if (update) fs::remove_all(kGolden);
  for (Compression c : {Compression::kNone, Compression::kZstd}) {
    OwnedState s;
    BuildGoldenState(s, true);
    auto st = SaveCheckpoint(s.dict(), GoldenOptions(root, c));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    const std::string it = IterDirName(GoldenOptions(root, c).iteration);
    auto fresh = ReadFileToString(DefaultEnv(), root + "/" + it + "/manifest.json");
    auto golden = ReadFileToString(DefaultEnv(), kGolden + "/" + it + "/manifest.json");
    ASSERT_TRUE(fresh.ok() && golden.ok()) << "missing golden files under " << kGolden;
    EXPECT_EQ(*fresh, *golden) << "format drift in " << it << ": bump format_version and regenerate";
  }
}

TEST(GoldenTest, GoldenCheckpointsLoadAndVerify) {
  for (const std::string& dir : kGoldenDirs)
  for (int64_t iter : {1, 2}) {
    SCOPED_TRACE(dir + " iteration " + std::to_string(iter));
    OwnedState d;
    BuildGoldenState(d, false);
    LoadOptions lo;
    lo.root = dir;
    lo.iteration = iter;
    auto st = LoadCheckpoint(d.dict(), lo);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    EXPECT_EQ(d.CountMismatches(), 0);
    ASSERT_EQ(d.dict().objects()[0].bytes.size(), 16u);
    VerifyOptions vo;
    vo.iteration = iter;
    auto report = VerifyCheckpoint(DefaultEnv(), dir, vo);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(report->ok());
  }
}

}  // namespace
}  // namespace ckpt
