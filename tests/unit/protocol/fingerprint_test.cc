// Layout-invariant fingerprint and diff of committed checkpoints: the same
// global state saved under different layouts, encodings and shard forms
// fingerprints identically; a 1-ulp change of one element does not; the diff
// names the tensor, the element and the ulp distance.
#include "ckpt/protocol/fingerprint.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <thread>

#include "ckpt/protocol/checkpoint.h"
#include "reshard/family.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"
#include "reshard/megatron_gpt.h"
#include "harness/state_util.h"
#include "harness/test_util.h"
#include "ckpt/workload/gpt_local_state.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;

// Called on each rank's filled state before the save (to perturb it).
using Mutate = std::function<void(int rank, workload::GptLocalState&)>;

// Saves the tiny GPT's expected-value state under `spec`, one thread per rank.
std::string SaveGpt(const std::string& name, const std::string& spec, const Mutate& mutate = {},
                    Compression comp = Compression::kNone, int64_t chunk_bytes = 4 << 20,
                    const nlohmann::json& metadata = {}) {
  const std::string root = testing::ScratchDir(name);
  auto cfg = reshard::GptPreset("tiny");
  auto pc = ParallelConfig::Parse(spec);
  EXPECT_TRUE(cfg.ok() && pc.ok());
  const int world = pc->world_size();
  auto comms = MakeThreadComms(world);
  std::vector<Status> st(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      st[r] = [&]() -> Status {
        CKPT_ASSIGN_OR_RETURN(RankCoords c, CoordsOf(*pc, r));
        CKPT_ASSIGN_OR_RETURN(auto shards, reshard::GptShards(*cfg, *pc, c));
        CKPT_ASSIGN_OR_RETURN(auto state, workload::GptLocalState::Create(std::move(shards)));
        CKPT_RETURN_IF_ERROR(state.FillExpected(cfg->vocab_size));
        if (mutate) mutate(r, state);
        SaveOptions o;
        o.root = root;
        o.iteration = 4;
        o.comm = comms[r].get();
        o.write.codec.compression = comp;
        o.write.chunk_bytes = chunk_bytes;
        o.layout = reshard::LayoutToJson(*pc);
        o.metadata = metadata.is_null() ? nlohmann::json{{"gpt", reshard::GptConfigToJson(*cfg)}} : metadata;
        ShardedStateDict sd = state.StateDict();
        return SaveCheckpoint(sd, o).status();
      }();
    });
  for (auto& t : threads) t.join();
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
  return root;
}

Fingerprint Fp(const std::string& root, int64_t block_bytes = 4 << 20) {
  FingerprintOptions o;
  o.block_bytes = block_bytes;
  auto fp = FingerprintCheckpoint(root, o);
  EXPECT_TRUE(fp.ok()) << fp.status().ToString();
  return fp.ok() ? *fp : Fingerprint{};
}

const TensorFingerprint* Find(const Fingerprint& fp, const std::string& key) {
  for (const auto& t : fp.tensors)
    if (t.key == key) return &t;
  return nullptr;
}

// Adds one to the raw bits of element `local` of the shard of `key` (bf16: one ulp).
void BumpBits(workload::GptLocalState& s, const std::string& key, int64_t local) {
  for (size_t i = 0; i < s.shards().size(); ++i) {
    if (s.shards()[i].tensor.key != key) continue;
    uint16_t v;
    std::memcpy(&v, s.ShardData(i).data() + 2 * local, 2);
    ++v;
    std::memcpy(s.ShardData(i).data() + 2 * local, &v, 2);
    return;
  }
  ADD_FAILURE() << "no shard of " << key;
}

constexpr const char* kFc2 = "decoder.layers.3.mlp.linear_fc2.weight";

TEST(FingerprintTest, SameStateUnderTp4Pp2AndTp2Pp1IsEqual) {
  const Fingerprint a = Fp(SaveGpt("fp_tp4pp2", "tp=4,pp=2"));
  const Fingerprint b = Fp(SaveGpt("fp_tp2", "tp=2"));
  const Fingerprint c = Fp(SaveGpt("fp_tp1_zstd", "tp=1", {}, Compression::kZstd, 4096));
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_EQ(a.digest, c.digest);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    EXPECT_EQ(a.tensors[i].key, b.tensors[i].key);
    EXPECT_EQ(a.tensors[i].digest, b.tensors[i].digest) << a.tensors[i].key;
  }
  // The padded vocabulary differs per TP; the canonical shape is the real vocabulary.
  const TensorFingerprint* ea = Find(a, "embedding.word_embeddings.weight");
  const TensorFingerprint* eb = Find(b, "embedding.word_embeddings.weight");
  ASSERT_TRUE(ea && eb);
  EXPECT_EQ(ea->saved_shape, (Shape{1536, 64}));
  EXPECT_EQ(eb->saved_shape, (Shape{1280, 64}));
  EXPECT_EQ(ea->canonical_shape, (Shape{1100, 64}));
  EXPECT_EQ(ea->padding_nonzero, 0);
  EXPECT_GT(ea->shards, eb->shards);
}

// The family recorded as "model": {"family", "config"} (reshard/family.h)
// decides the canonical rows as the "gpt" key of older checkpoints does.
TEST(FingerprintTest, ModelFamilyMetadataMakesThePaddedVocabularyCanonical) {
  const nlohmann::json meta = {
      {"model", reshard::ModelMetadata(*reshard::MegatronGptFamily(), reshard::GptConfigToJson(*reshard::GptPreset("tiny")))}};
  const Fingerprint a = Fp(SaveGpt("fp_family_tp4", "tp=4", {}, Compression::kNone, 4 << 20, meta));
  const Fingerprint b = Fp(SaveGpt("fp_family_tp1", "tp=1", {}, Compression::kNone, 4 << 20, meta));
  const Fingerprint legacy = Fp(SaveGpt("fp_family_legacy", "tp=2"));
  EXPECT_EQ(a.digest, b.digest);
  EXPECT_EQ(a.digest, legacy.digest);
  const TensorFingerprint* e = Find(a, "embedding.word_embeddings.weight");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->canonical_shape, (Shape{1100, 64}));
}

// A family the reader does not know could pad anything: no silent fingerprint of the padding.
TEST(FingerprintTest, UnregisteredModelFamilyIsAnErrorNamingIt) {
  const std::string root =
      SaveGpt("fp_family_t5", "tp=1", {}, Compression::kNone, 4 << 20, {{"model", {{"family", "t5"}}}});
  auto fp = FingerprintCheckpoint(root);
  ASSERT_EQ(fp.status().code(), Code::kNotFound) << fp.status().ToString();
  EXPECT_NE(fp.status().message().find("'t5'"), std::string::npos) << fp.status().ToString();
  EXPECT_NE(fp.status().message().find(root), std::string::npos) << fp.status().ToString();
}

TEST(FingerprintTest, OneUlpChangeOfOneElementIsFoundByDiff) {
  const std::string clean = SaveGpt("fp_clean", "tp=2");
  // fc2 [64, 128] is split on axis 1: rank 1 holds columns [64, 128); local (5, 7) is global [5, 71].
  const std::string bumped = SaveGpt("fp_bumped", "tp=2", [](int r, workload::GptLocalState& s) {
    if (r == 1) BumpBits(s, kFc2, 5 * 64 + 7);
  });
  const Fingerprint a = Fp(clean), b = Fp(bumped);
  EXPECT_NE(a.digest, b.digest);
  int differing = 0;
  for (size_t i = 0; i < a.tensors.size(); ++i)
    if (a.tensors[i].digest != b.tensors[i].digest) {
      ++differing;
      EXPECT_EQ(a.tensors[i].key, kFc2);
    }
  EXPECT_EQ(differing, 1);

  auto d = DiffCheckpoints(clean, bumped);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_FALSE(d->same());
  ASSERT_EQ(d->tensors.size(), 1u);
  const TensorDiff& t = d->tensors[0];
  EXPECT_EQ(t.key, kFc2);
  EXPECT_EQ(t.status, "differ");
  EXPECT_EQ(t.differing, 1);
  EXPECT_EQ(t.elements, 64 * 128);
  EXPECT_EQ(t.max_ulp, 1u);
  EXPECT_EQ(t.max_index, (Shape{5, 71}));
  EXPECT_GT(t.max_abs, 0.0);
  EXPECT_EQ(d->max_ulp(), 1u);

  auto same = DiffCheckpoints(clean, SaveGpt("fp_clean_tp4pp2", "tp=4,pp=2"));
  ASSERT_TRUE(same.ok()) << same.status().ToString();
  EXPECT_TRUE(same->same());
  EXPECT_EQ(same->tensors_compared, int64_t(a.tensors.size()));
}

TEST(FingerprintTest, NonZeroVocabPaddingIsFlagged) {
  const std::string clean = SaveGpt("fp_pad_clean", "tp=2");
  // Rank 0 holds embedding rows [0, 640), rank 1 rows [640, 1280): row 1200 is padding.
  const std::string dirty = SaveGpt("fp_pad_dirty", "tp=2", [](int r, workload::GptLocalState& s) {
    if (r == 1) BumpBits(s, "embedding.word_embeddings.weight", (1200 - 640) * 64 + 3);
  });
  const Fingerprint a = Fp(clean), b = Fp(dirty);
  EXPECT_NE(a.digest, b.digest);
  EXPECT_EQ(Find(b, "embedding.word_embeddings.weight")->padding_nonzero, 1);
  auto d = DiffCheckpoints(clean, dirty);
  ASSERT_TRUE(d.ok());
  ASSERT_EQ(d->tensors.size(), 1u);
  EXPECT_EQ(d->tensors[0].status, "padding");
}

// Sum of the stored chunk sizes the manifest records: what reading every chunk once costs.
int64_t StoredChunkBytes(const std::string& root) {
  auto m = ReadManifest(DefaultEnv(), root, -1);
  EXPECT_TRUE(m.ok());
  int64_t n = 0;
  for (const auto& s : m->shards)
    for (const auto& c : s.record.chunks) n += int64_t(c.stored_size);
  for (const auto& o : m->objects)
    for (const auto& c : o.record.chunks) n += int64_t(c.stored_size);
  return n;
}

TEST(FingerprintTest, SmallBlocksReadEachChunkOnceInBoundedMemory) {
  const std::string root = SaveGpt("fp_blocks", "tp=4", {}, Compression::kZstd, 4096);
  const Fingerprint big = Fp(root), small = Fp(root, 256);
  EXPECT_EQ(big.digest, small.digest);
  EXPECT_EQ(small.bytes_read, StoredChunkBytes(root));  // the per-shard cache: no chunk re-read
  // Peak = one block + one decoded chunk per saved shard of the tensor being read.
  auto m = ReadManifest(DefaultEnv(), root, -1);
  ASSERT_TRUE(m.ok());
  std::map<std::string, int64_t> cached;
  for (const auto& sh : m->shards)
    cached[sh.meta.key] += std::min(sh.record.chunk_elems, sh.meta.num_elements()) * int64_t(DTypeSize(sh.meta.dtype));
  int64_t bound = 0;
  for (const auto& [k, v] : cached) bound = std::max(bound, v);
  EXPECT_LE(small.peak_buffer_bytes, 256 + bound);
  EXPECT_LT(small.peak_buffer_bytes, 1536 * 64 * 2 / 4);  // far below the 196 KiB embedding
  EXPECT_GT(small.peak_buffer_bytes, 0);
}

TEST(FingerprintTest, FlatRangeFragmentsEqualBoxesAndGridObjectsAreExcluded) {
  const std::string boxes = testing::ScratchDir("fp_boxes");
  {
    OwnedState s;
    s.Add(Desc("w", DType::kFloat32, {40, 6}, {0, 0}, {40, 6}), true);
    s.AddObject({"resume.x", {1}, {0}, {}}, "same bytes");
    SaveOptions o;
    o.root = boxes;
    o.iteration = 1;
    ASSERT_TRUE(SaveCheckpoint(s.dict(), o).ok());
  }
  const std::string frags = testing::ScratchDir("fp_frags");
  auto comms = MakeThreadComms(3);
  const std::vector<FlatRange> ranges = {{0, 100}, {100, 170}, {170, 240}};
  std::vector<std::thread> threads;
  std::vector<Status> st(3);
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      OwnedState s;
      s.Add(Desc("w", DType::kFloat32, {40, 6}, {0, 0}, {40, 6}, {}, ranges[r]), true);
      s.AddObject({"resume.x", {1}, {0}, {r == 0 ? 0 : 1}}, "same bytes");
      s.AddObject({"per_rank_rng", {3}, {r}, {}}, "rank " + std::to_string(r));
      SaveOptions o;
      o.root = frags;
      o.iteration = 9;
      o.comm = comms[r].get();
      st[r] = SaveCheckpoint(s.dict(), o).status();
    });
  for (auto& t : threads) t.join();
  for (const Status& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  const Fingerprint a = Fp(boxes), b = Fp(frags);
  EXPECT_EQ(a.digest, b.digest);
  ASSERT_EQ(b.objects.size(), 2u);
  EXPECT_EQ(b.objects[0].key, "per_rank_rng");
  EXPECT_FALSE(b.objects[0].included);
  EXPECT_EQ(b.objects[0].cells, 3);
  EXPECT_TRUE(b.objects[1].included);
  auto d = DiffCheckpoints(boxes, frags);
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d->same());
  EXPECT_EQ(d->objects_compared, 1);
}

TEST(FingerprintTest, UlpDistance) {
  auto f32 = [](float a, float b) { return UlpDistance(DType::kFloat32, reinterpret_cast<std::byte*>(&a), reinterpret_cast<std::byte*>(&b)); };
  EXPECT_EQ(f32(1.0f, std::nextafter(1.0f, 2.0f)), 1u);
  EXPECT_EQ(f32(1.0f, 1.0f), 0u);
  EXPECT_EQ(f32(0.0f, -0.0f), 0u);
  EXPECT_EQ(f32(-1.0f, 1.0f), 2u * 0x3f800000u);
  EXPECT_EQ(f32(std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min()), 2u);
  EXPECT_EQ(f32(std::nanf(""), 1.0f), kUlpNaN);
  EXPECT_EQ(f32(std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max()), 1u);
  double x = 1.0, y = std::nextafter(1.0, 0.0);
  EXPECT_EQ(UlpDistance(DType::kFloat64, reinterpret_cast<std::byte*>(&x), reinterpret_cast<std::byte*>(&y)), 1u);
  uint16_t p = 0x3f80, q = 0x3f83;
  EXPECT_EQ(UlpDistance(DType::kBFloat16, reinterpret_cast<std::byte*>(&p), reinterpret_cast<std::byte*>(&q)), 3u);
  int64_t i = -5, j = 7;
  EXPECT_EQ(UlpDistance(DType::kInt64, reinterpret_cast<std::byte*>(&i), reinterpret_cast<std::byte*>(&j)), 12u);
}

using testing::CmdResult;
CmdResult Ckpt(const std::string& args) { return testing::RunCkpt(args); }

TEST(FingerprintTest, CliExitCodesAndOutput) {
  const std::string a = SaveGpt("fp_cli_a", "tp=2");
  const std::string b = SaveGpt("fp_cli_b", "tp=1", [](int, workload::GptLocalState& s) { BumpBits(s, kFc2, 0); });
  CmdResult r = Ckpt("fingerprint --per-tensor " + a);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find(Fp(a).digest), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("embedding.word_embeddings.weight bf16 [1100, 64] (saved [1280, 64])"), std::string::npos) << r.out;
  r = Ckpt("fingerprint --json " + b);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["digest"], Fp(b).digest);
  r = Ckpt("diff " + a + " " + a);
  EXPECT_EQ(r.code, 0) << r.out;
  r = Ckpt("diff " + a + " " + b);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find(std::string("differ  ") + kFc2 + ": 1 of 8192 elements, max 1 ulp at [0, 0]"), std::string::npos)
      << r.out;
  r = Ckpt("diff --json " + a + " " + b);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(nlohmann::json::parse(r.out)["max_ulp"], 1);
  r = Ckpt("diff " + a + " " + a + "/missing");
  EXPECT_EQ(r.code, 2) << r.out;
}

}  // namespace
}  // namespace ckpt
