// Golden files pin the on-disk format (docs/FORMAT.md): the committed
// checkpoints of every format version (tests/golden/v1, v2) must keep loading
// and verifying with the same values, and saving the same state again must
// reproduce the current version's manifests byte for byte. The current
// version's directory holds one checkpoint per writer variant: iteration 1
// (raw, SHA-256 chunk hashes: no "chunk_hash" member), 2 (zstd, SHA-256) and
// 3 (raw, XXH3-128: "chunk_hash":"xxh3-128"). A manifest naming a hash this
// build does not know is refused as kFailedPrecondition (exit 2), not damage.
// After a format_version bump, write the new version's directory with
// CKPT_UPDATE_GOLDEN=1 golden_test (and add its cases to GoldenCases).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>

#include "ckpt/base/chunk_hash.h"
#include "ckpt/base/sha256.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/verify.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;
namespace fs = std::filesystem;

const std::string kGoldenRoot = std::string(CKPT_SOURCE_DIR) + "/tests/golden/";
const std::string kGolden = kGoldenRoot + "v" + std::to_string(kFormatVersion);  // the current version
const std::string kGoldenV1 = kGoldenRoot + "v1";
constexpr int64_t kXxh3Iteration = 3;  // of kGolden

// The golden checkpoints: root, iteration, compression, chunk hash.
struct GoldenCase {
  std::string root;
  int64_t iteration;
  Compression compression;
  ChunkHash hash;
};
std::vector<GoldenCase> GoldenCases() {
  return {{kGoldenV1, 1, Compression::kNone, ChunkHash::kSha256},
          {kGoldenV1, 2, Compression::kZstd, ChunkHash::kSha256},
          {kGolden, 1, Compression::kNone, ChunkHash::kSha256},
          {kGolden, 2, Compression::kZstd, ChunkHash::kSha256},
          {kGolden, kXxh3Iteration, Compression::kNone, ChunkHash::kXxh3_128}};
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
  // Direct IO aligns chunk offsets (shard_file.h): the golden files pin the
  // packed layout, whatever CKPT_DIRECT_IO says.
  o.write.direct_io = false;
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
  int cases = 0;
  for (const GoldenCase& g : GoldenCases()) {
    if (g.root != kGolden) continue;  // older versions: load only
    ++cases;
    OwnedState s;
    BuildGoldenState(s, true);
    auto st = SaveCheckpoint(s.dict(), GoldenOptions(root, g));
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    const std::string it = IterDirName(g.iteration);
    auto fresh = ReadFileToString(DefaultEnv(), root + "/" + it + "/manifest.json");
    auto golden = ReadFileToString(DefaultEnv(), kGolden + "/" + it + "/manifest.json");
    ASSERT_TRUE(fresh.ok() && golden.ok()) << "missing golden files under " << kGolden;
    EXPECT_EQ(*fresh, *golden) << "format drift in " << it << ": bump format_version and regenerate";
  }
  EXPECT_EQ(cases, 3);
}

// SHA-256 chunk digests need no "chunk_hash" member (v1: not allowed; v2:
// optional, writers omit it); the XXH3 checkpoint names its hash. meta_sha256
// is SHA-256 whatever the chunk hash (it gates HDF5 parsing).
TEST(GoldenTest, ManifestsRecordTheirChunkHash) {
  auto v1 = ReadManifest(DefaultEnv(), kGoldenV1, 1);
  auto sha = ReadManifest(DefaultEnv(), kGolden, 1);
  auto xxh = ReadManifest(DefaultEnv(), kGolden, kXxh3Iteration);
  ASSERT_TRUE(v1.ok() && sha.ok() && xxh.ok())
      << v1.status().ToString() << " " << sha.status().ToString() << " " << xxh.status().ToString();
  EXPECT_EQ(v1->format_version, 1);
  EXPECT_EQ(v1->chunk_hash, ChunkHash::kSha256);
  EXPECT_TRUE(v1->files[0].meta_sha256.empty());
  EXPECT_EQ(sha->format_version, 2);
  EXPECT_EQ(sha->chunk_hash, ChunkHash::kSha256);
  EXPECT_EQ(xxh->format_version, 2);
  EXPECT_EQ(xxh->chunk_hash, ChunkHash::kXxh3_128);
  auto sha_text = ReadFileToString(DefaultEnv(), kGolden + "/iter_0000001/manifest.json");
  auto xxh_text = ReadFileToString(DefaultEnv(), kGolden + "/" + IterDirName(kXxh3Iteration) + "/manifest.json");
  ASSERT_TRUE(sha_text.ok() && xxh_text.ok());
  EXPECT_EQ(sha_text->find("chunk_hash"), std::string::npos);
  EXPECT_NE(xxh_text->find("\"chunk_hash\":\"xxh3-128\""), std::string::npos);
  EXPECT_EQ(xxh->shards[0].record.chunks[0].sha256.size(), 32u);
  EXPECT_EQ(xxh->files[0].meta_sha256.size(), 64u);
  EXPECT_EQ(xxh->files[0].meta_sha256.find_first_not_of("0123456789abcdef"), std::string::npos);
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

// A copy of the current golden directory whose manifest of `iteration` (the
// XXH3 one unless said) says `edit(body)`, self-hash redone.
std::string EditedV2(const std::string& name, const std::function<std::string(std::string)>& edit,
                     int64_t iteration = kXxh3Iteration) {
  const std::string root = testing::ScratchDir(name);
  fs::copy(kGolden, root, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
  const std::string path = root + "/" + IterDirName(iteration) + "/manifest.json";
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
// a chunk_hash in version 1 and digests of the wrong length (an XXH3
// checkpoint without its chunk_hash reads as SHA-256) are damage.
TEST(GoldenTest, UnknownOrInconsistentChunkHashIsRefused) {
  const std::string unknown = EditedV2("golden_blake3", [](std::string b) { return Replace(b, "xxh3-128", "blake3"); });
  auto m = ReadManifest(DefaultEnv(), unknown, kXxh3Iteration);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kFailedPrecondition) << m.status().ToString();
  EXPECT_NE(m.status().message().find("unknown chunk hash 'blake3'"), std::string::npos) << m.status().ToString();
  OwnedState d;
  BuildGoldenState(d, false);
  LoadOptions lo;
  lo.root = unknown;
  lo.iteration = kXxh3Iteration;
  auto loaded = LoadCheckpoint(d.dict(), lo);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Code::kFailedPrecondition) << loaded.status().ToString();

  const std::string as_v1 = EditedV2("golden_v1_with_hash", [](std::string b) {
    return Replace(b, "\"format_version\":2", "\"format_version\":1");
  });
  auto v1 = ReadManifest(DefaultEnv(), as_v1, kXxh3Iteration);
  EXPECT_EQ(v1.status().code(), Code::kCorruption);
  EXPECT_NE(v1.status().message().find("not allowed in format_version 1"), std::string::npos) << v1.status().ToString();
  const std::string no_field = EditedV2("golden_v2_no_hash", [](std::string b) {
    return Replace(b, "\"chunk_hash\":\"xxh3-128\",", "");
  });
  // XXH3 digests (32 hex digits) read as SHA-256 (64): each chunk's digest is the wrong length.
  auto sha = ReadManifest(DefaultEnv(), no_field, kXxh3Iteration);
  EXPECT_EQ(sha.status().code(), Code::kCorruption);
  EXPECT_NE(sha.status().message().find("not 64 lowercase hex digits"), std::string::npos) << sha.status().ToString();
  // Spelling out the default is allowed: "chunk_hash":"sha256" on a SHA-256 checkpoint loads.
  const std::string explicit_sha = EditedV2("golden_v2_explicit_sha", [](std::string b) {
    return Replace(b, "\"files\":", "\"chunk_hash\":\"sha256\",\"files\":");
  }, 1);
  auto ex = ReadManifest(DefaultEnv(), explicit_sha, 1);
  ASSERT_TRUE(ex.ok()) << ex.status().ToString();
  EXPECT_EQ(ex->chunk_hash, ChunkHash::kSha256);
}

TEST(GoldenTest, GoldenCheckpointsLoadAndVerify) {
  for (const GoldenCase& g : GoldenCases()) {
    SCOPED_TRACE(g.root + " iteration " + std::to_string(g.iteration));
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
