// Golden files pin the on-disk format (docs/FORMAT.md): the committed
// checkpoints in tests/golden/v1 (SHA-256 chunk hashes, format_version 1) and
// tests/golden/v2 (XXH3-128, format_version 2 with "chunk_hash") must keep
// loading with the same values, and saving the same state again must
// reproduce their manifests byte for byte. A manifest naming a hash this
// build does not know is refused as kFailedPrecondition (exit 2), not damage.
// Regenerate (only with a format_version bump): CKPT_UPDATE_GOLDEN=1 golden_test
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>

#include "ckpt/base/chunk_hash.h"
#include "ckpt/base/sha256.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/verify.h"
#include "support/state_util.h"
#include "support/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;
namespace fs = std::filesystem;

const std::string kGolden = std::string(CKPT_SOURCE_DIR) + "/tests/golden/v1";
const std::string kGoldenV2 = std::string(CKPT_SOURCE_DIR) + "/tests/golden/v2";

// The golden checkpoints: root, iteration, compression, chunk hash.
struct GoldenCase {
  std::string root;
  int64_t iteration;
  Compression compression;
  ChunkHash hash;
};
std::vector<GoldenCase> GoldenCases() {
  return {{kGolden, 1, Compression::kNone, ChunkHash::kSha256},
          {kGolden, 2, Compression::kZstd, ChunkHash::kSha256},
          {kGoldenV2, 1, Compression::kNone, ChunkHash::kXxh3_128}};
}

void BuildGoldenState(OwnedState& s, bool fill) {
  s.Add(Desc("embedding.word_embeddings.weight", DType::kBFloat16, {40, 16}, {0, 0}, {40, 16}), fill);
  s.Add(Desc("decoder.layers.0.mlp.linear_fc2.weight", DType::kFloat32, {16, 24}, {0, 0}, {16, 24}), fill);
  for (FlatRange r : {FlatRange{0, 10}, FlatRange{10, 300}, FlatRange{300, 384}})
    s.Add(Desc("optimizer.exp_avg", DType::kFloat32, {16, 24}, {0, 0}, {16, 24}, {}, r), fill);
  s.Add(Desc("step", DType::kInt64, {}, {}, {}), fill);
  s.AddObject({"rng", {1}, {0}, {}}, "golden-rng-state");
}

SaveOptions GoldenOptions(const std::string& root, const GoldenCase& g) {
  SaveOptions o;
  o.root = root;
  o.iteration = g.iteration;
  o.write.codec.compression = g.compression;
  o.write.hash = g.hash;
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
  if (update) fs::remove_all(kGolden), fs::remove_all(kGoldenV2);
  for (const GoldenCase& g : GoldenCases()) {
    const std::string root = update ? g.root : testing::ScratchDir("golden") + "/" + fs::path(g.root).filename().string();
    OwnedState s;
    BuildGoldenState(s, true);
    auto st = SaveCheckpoint(s.dict(), GoldenOptions(root, g));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    const std::string it = IterDirName(g.iteration);
    auto fresh = ReadFileToString(DefaultEnv(), root + "/" + it + "/manifest.json");
    auto golden = ReadFileToString(DefaultEnv(), g.root + "/" + it + "/manifest.json");
    ASSERT_TRUE(fresh.ok() && golden.ok()) << "missing golden files under " << g.root;
    EXPECT_EQ(*fresh, *golden) << "format drift in " << g.root << "/" << it << ": bump format_version and regenerate";
  }
}

// The v2 manifest records its hash; v1 records none (SHA-256 implied).
TEST(GoldenTest, ManifestsRecordTheirChunkHash) {
  auto v1 = ReadManifest(DefaultEnv(), kGolden, 1);
  auto v2 = ReadManifest(DefaultEnv(), kGoldenV2, 1);
  ASSERT_TRUE(v1.ok() && v2.ok()) << v1.status().ToString() << " " << v2.status().ToString();
  EXPECT_EQ(v1->format_version, 1);
  EXPECT_EQ(v1->chunk_hash, ChunkHash::kSha256);
  EXPECT_EQ(v2->format_version, 2);
  EXPECT_EQ(v2->chunk_hash, ChunkHash::kXxh3_128);
  auto text = ReadFileToString(DefaultEnv(), kGoldenV2 + "/iter_0000001/manifest.json");
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("\"chunk_hash\":\"xxh3-128\""), std::string::npos);
  EXPECT_EQ(v2->shards[0].record.chunks[0].sha256.size(), 32u);
}

// Known answers (xxHash's reference values, seed 0, canonical big-endian):
// the digest spelling docs/FORMAT.md specifies.
TEST(GoldenTest, Xxh3DigestsAreTheReferenceValues) {
  EXPECT_EQ(ChunkHashHex(ChunkHash::kXxh3_128, {}), "99aa06d3014798d86001c324468d497f");
  const std::string abc = "abc";
  EXPECT_EQ(ChunkHashHex(ChunkHash::kXxh3_128, std::as_bytes(std::span(abc.data(), abc.size()))),
            "06b05ab6733a618578af5f94892f3950");
  EXPECT_EQ(ChunkHashHex(ChunkHash::kSha256, std::as_bytes(std::span(abc.data(), abc.size()))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  ChunkHasher h(ChunkHash::kXxh3_128);  // incremental = one-shot
  h.Update(std::as_bytes(std::span(abc.data(), 1)));
  h.Update(std::as_bytes(std::span(abc.data() + 1, 2)));
  EXPECT_EQ(h.FinishHex(), "06b05ab6733a618578af5f94892f3950");
}

// A copy of the v2 checkpoint whose manifest says `edit(body)`, self-hash redone.
std::string EditedV2(const std::string& name, const std::function<std::string(std::string)>& edit) {
  const std::string root = testing::ScratchDir(name);
  fs::copy(kGoldenV2, root, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const std::string path = root + "/iter_0000001/manifest.json";
  auto text = ReadFileToString(DefaultEnv(), path);
  EXPECT_TRUE(text.ok());
  const std::string body = edit(text->substr(text->find('\n') + 1));
  const std::string out = "{\"manifest_sha256\":\"" + Sha256Hex(body) + "\",\n" + body;
  EXPECT_TRUE(WriteStringToFileSync(DefaultEnv(), path, out).ok());
  return root;
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

// Validated like every other field: an unknown algorithm is refused by name
// (not reported as damage: the checkpoint may be sound, the reader too old);
// a missing or misplaced chunk_hash and digests of the wrong length are damage.
TEST(GoldenTest, UnknownOrInconsistentChunkHashIsRefused) {
  const std::string unknown = EditedV2("golden_blake3", [](std::string b) { return Replace(b, "xxh3-128", "blake3"); });
  auto m = ReadManifest(DefaultEnv(), unknown, 1);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kFailedPrecondition) << m.status().ToString();
  EXPECT_NE(m.status().message().find("unknown chunk hash 'blake3'"), std::string::npos) << m.status().ToString();
  OwnedState d;
  BuildGoldenState(d, false);
  LoadOptions lo;
  lo.root = unknown;
  auto loaded = LoadCheckpoint(d.dict(), lo);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Code::kFailedPrecondition) << loaded.status().ToString();

  const std::string as_v1 = EditedV2("golden_v1_with_hash", [](std::string b) {
    return Replace(b, "\"format_version\":2", "\"format_version\":1");
  });
  EXPECT_EQ(ReadManifest(DefaultEnv(), as_v1, 1).status().code(), Code::kCorruption);
  const std::string no_field = EditedV2("golden_v2_no_hash", [](std::string b) {
    return Replace(b, "\"chunk_hash\":\"xxh3-128\",", "");
  });
  EXPECT_EQ(ReadManifest(DefaultEnv(), no_field, 1).status().code(), Code::kCorruption);
  // v2 digests (32 hex digits) under SHA-256 (64): each chunk's digest is the wrong length.
  const std::string as_sha = EditedV2("golden_v2_as_sha", [](std::string b) {
    return Replace(Replace(b, "\"chunk_hash\":\"xxh3-128\",", ""), "\"format_version\":2", "\"format_version\":1");
  });
  auto sha = ReadManifest(DefaultEnv(), as_sha, 1);
  EXPECT_EQ(sha.status().code(), Code::kCorruption);
  EXPECT_NE(sha.status().message().find("not 64 lowercase hex digits"), std::string::npos) << sha.status().ToString();
}

TEST(GoldenTest, GoldenCheckpointsLoadAndVerify) {
  for (const GoldenCase& g : GoldenCases()) {
    OwnedState d;
    BuildGoldenState(d, false);
    LoadOptions lo;
    lo.root = g.root;
    lo.iteration = g.iteration;
    auto st = LoadCheckpoint(d.dict(), lo);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    EXPECT_EQ(d.CountMismatches(), 0);
    ASSERT_EQ(d.dict().objects()[0].bytes.size(), 16u);
    VerifyOptions vo;
    vo.iteration = g.iteration;
    auto report = VerifyCheckpoint(DefaultEnv(), g.root, vo);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(report->ok());
  }
}

}  // namespace
}  // namespace ckpt
