// After-commit damage: every kind is detected by verify and by the loader,
// naming file (and tensor and chunk for flips); --fallback returns the older
// checkpoint bit for bit. The oracle tells iterations apart in every element.
#include <gtest/gtest.h>

#include <cstring>
#include <set>

#include "ckpt/protocol/checkpoint.h"
#include "reshard/parallel_state.h"
#include "ckpt/protocol/verify.h"
#include "faults/damage.h"
#include "faults/jobs.h"
#include "faults/oracle.h"
#include "harness/test_util.h"
#include "ckpt/workload/gpt_local_state.h"

namespace ckpt::faults {
namespace {

struct Gpt {
  reshard::GptConfig cfg;
  std::unique_ptr<workload::GptLocalState> state;
};

Gpt MakeGpt(const std::string& layout = "tp=1") {
  Gpt g;
  g.cfg = *reshard::GptPreset("tiny");
  g.cfg.num_layers = 2;
  ParallelConfig pc = *ParallelConfig::Parse(layout);
  auto shards = *reshard::GptShards(g.cfg, pc, *CoordsOf(pc, 0));
  g.state = std::make_unique<workload::GptLocalState>(*workload::GptLocalState::Create(std::move(shards)));
  return g;
}

void Save(const std::string& root, int64_t iter) {
  Gpt g = MakeGpt();
  ASSERT_TRUE(FillForIteration(*g.state, g.cfg.vocab_size, iter).ok());
  SaveOptions o;
  o.root = root;
  o.iteration = iter;
  o.write.chunk_bytes = 16 << 10;
  ShardedStateDict sd = g.state->StateDict();
  ASSERT_TRUE(SaveCheckpoint(sd, o).ok());
}

TEST(Oracle, IterationsDifferInEveryRealElement) {
  Gpt a = MakeGpt(), b = MakeGpt();
  ASSERT_TRUE(FillForIteration(*a.state, a.cfg.vocab_size, 10).ok());
  ASSERT_TRUE(FillForIteration(*b.state, b.cfg.vocab_size, 20).ok());
  EXPECT_EQ(*MismatchesForIteration(*a.state, a.cfg.vocab_size, 10, nullptr), 0);
  int64_t elements = 0, padding = 0;
  for (size_t i = 0; i < a.state->shards().size(); ++i) elements += a.state->shards()[i].tensor.num_elements();
  // Padded vocab rows are zero in both; every other element differs (values
  // are keyed hashes: a rare collision would show up here as a shortfall).
  padding = (reshard::PaddedVocabSize(a.cfg, 1) - a.cfg.vocab_size) * a.cfg.hidden * 2;
  std::string first;
  const int64_t bad = *MismatchesForIteration(*a.state, a.cfg.vocab_size, 20, &first);
  EXPECT_GT(bad, (elements - padding) * 95 / 100);
  EXPECT_FALSE(first.empty());
}

class DamageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::ScratchDir("damage") + "/root";
    Save(root_, 10);
    Save(root_, 20);
  }
  // The loader's verdict: the error message, or "" after a clean load.
  std::string LoadError(bool fallback, int64_t* iteration) {
    Gpt g = MakeGpt();
    LoadOptions o;
    o.root = root_;
    o.fallback = fallback;
    ShardedStateDict sd = g.state->StateDict();
    auto r = LoadCheckpoint(sd, o);
    if (!r.ok()) return r.status().ToString();
    *iteration = r->iteration;
    EXPECT_EQ(*MismatchesForIteration(*g.state, g.cfg.vocab_size, r->iteration, nullptr), 0);
    return "";
  }
  std::string root_;
};

TEST_F(DamageTest, BitFlipsAreNamedByVerifyAndLoader) {
  for (const char* where : {"first", "mid", "last"}) {
    SetUp();
    auto d = ApplyDamage(DefaultEnv(), root_, -1, {Action::kBitFlip, ShardFileName(0), where, 13});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_FALSE(d->tensor.empty());
    auto rep = VerifyCheckpoint(DefaultEnv(), root_, {});
    ASSERT_TRUE(rep.ok());
    ASSERT_EQ(rep->issues.size(), 1u) << where;
    EXPECT_EQ(rep->issues[0].file, d->path);
    EXPECT_EQ(rep->issues[0].tensor, d->tensor);
    EXPECT_EQ(rep->issues[0].chunk, d->chunk);
    int64_t it = -1;
    const std::string err = LoadError(false, &it);
    EXPECT_NE(err.find(d->path), std::string::npos) << err;
    EXPECT_NE(err.find("tensor '" + d->tensor + "'"), std::string::npos) << err;
    EXPECT_NE(err.find("chunk " + std::to_string(d->chunk)), std::string::npos) << err;
    EXPECT_EQ(LoadError(true, &it), "");
    EXPECT_EQ(it, 10);
  }
}

TEST_F(DamageTest, FirstMidLastHitDifferentChunks) {
  std::set<std::pair<std::string, int64_t>> hit;
  for (const char* where : {"first", "mid", "last"}) {
    SetUp();
    auto d = ApplyDamage(DefaultEnv(), root_, 20, {Action::kBitFlip, ShardFileName(0), where, 0});
    ASSERT_TRUE(d.ok());
    hit.insert({d->tensor, d->chunk});
  }
  EXPECT_EQ(hit.size(), 3u);
}

TEST_F(DamageTest, TruncationAndDeletionAreDetected) {
  for (Action a : {Action::kTruncate, Action::kDelete}) {
    SetUp();
    auto d = ApplyDamage(DefaultEnv(), root_, 20, {a, ShardFileName(0), "mid", 0});
    ASSERT_TRUE(d.ok());
    auto rep = VerifyCheckpoint(DefaultEnv(), root_, {});
    ASSERT_TRUE(rep.ok());
    ASSERT_FALSE(rep->ok());
    EXPECT_EQ(rep->issues[0].file, d->path);
    int64_t it = -1;
    EXPECT_NE(LoadError(false, &it).find(d->path), std::string::npos);
    EXPECT_EQ(LoadError(true, &it), "");
    EXPECT_EQ(it, 10);
  }
}

TEST_F(DamageTest, ManifestDamageIsDetected) {
  for (Action a : {Action::kBitFlip, Action::kTruncate, Action::kDelete}) {
    SetUp();
    auto d = ApplyDamage(DefaultEnv(), root_, 20, {a, "manifest", "mid", 5});
    ASSERT_TRUE(d.ok());
    EXPECT_FALSE(VerifyCheckpoint(DefaultEnv(), root_, {}).ok());  // an untrusted manifest is an error
    int64_t it = -1;
    EXPECT_NE(LoadError(false, &it).find("manifest"), std::string::npos);
    EXPECT_EQ(LoadError(true, &it), "");
    EXPECT_EQ(it, 10);
  }
}

// A size-preserving corruption of HDF5 metadata that libhdf5 does not survive:
// the root group's local-heap free list made to point at itself. Before
// format v2's metadata hash, `verify` handed the file to HDF5, which allocated
// free-list nodes until the process died (a 30 s timeout on `ckpt verify`).
// Now verify names the damaged file without parsing it; load reads chunks by
// their manifest offsets and hashes, and still loads every value.
TEST_F(DamageTest, HdfMetadataDamageIsNamedWithoutParsingIt) {
  const std::string path = root_ + "/" + IterDirName(20) + "/" + ShardFileName(0);
  auto bytes = ReadFileToString(DefaultEnv(), path);
  ASSERT_TRUE(bytes.ok());
  std::string b = *bytes;
  const size_t heap = b.find("HEAP");
  ASSERT_NE(heap, std::string::npos);
  uint64_t data_size = 0, free_head = 0, data_addr = 0;
  std::memcpy(&data_size, b.data() + heap + 8, 8);
  std::memcpy(&free_head, b.data() + heap + 16, 8);
  std::memcpy(&data_addr, b.data() + heap + 24, 8);
  ASSERT_LT(free_head, data_size);  // the heap has a free block to damage
  const uint64_t cycle[2] = {free_head, data_size - free_head};  // next = itself
  std::memcpy(b.data() + data_addr + free_head, cycle, sizeof cycle);
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), path, b).ok());

  auto rep = VerifyCheckpoint(DefaultEnv(), root_, {});
  ASSERT_TRUE(rep.ok()) << rep.status().ToString();
  ASSERT_EQ(rep->issues.size(), 1u);
  EXPECT_EQ(rep->issues[0].file, path);
  EXPECT_NE(rep->issues[0].problem.find("HDF5 metadata damaged"), std::string::npos) << rep->issues[0].problem;
  int64_t it = -1;
  EXPECT_EQ(LoadError(false, &it), "");
  EXPECT_EQ(it, 20);
}

TEST_F(DamageTest, RejectsUnknownTargets) {
  EXPECT_EQ(ApplyDamage(DefaultEnv(), root_, 20, {Action::kBitFlip, "rank_00099.h5", "mid", 0}).status().code(),
            Code::kNotFound);
  EXPECT_EQ(ApplyDamage(DefaultEnv(), root_, 20, {Action::kEio, ShardFileName(0), "mid", 0}).status().code(),
            Code::kInvalidArgument);
}

TEST(CloneTree, LinksOnlyWhatItIsTold) {
  const std::string dir = testing::ScratchDir("clone");
  ASSERT_TRUE(CreateDirs(DefaultEnv(), dir + "/src/a").ok());
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), dir + "/src/a/linked", "L").ok());
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), dir + "/src/copied", "C").ok());
  ASSERT_TRUE(CloneTree(dir + "/src", dir + "/dst", [](const std::string& rel) { return rel == "a/linked"; }).ok());
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), dir + "/dst/copied", "changed").ok());
  EXPECT_EQ(*ReadFileToString(DefaultEnv(), dir + "/src/copied"), "C");
  auto f = DefaultEnv()->OpenFile(dir + "/dst/a/linked", OpenMode::kReadWrite);
  ASSERT_TRUE(f.ok());
  ASSERT_TRUE((*f)->PWrite(0, std::as_bytes(std::span("X", 1))).ok());
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_EQ(*ReadFileToString(DefaultEnv(), dir + "/src/a/linked"), "X");  // a hard link
}

}  // namespace
}  // namespace ckpt::faults
