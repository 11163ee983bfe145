// Readers racing a live root (issue 28 item 2): verify, verify --all's
// iterations, load and load --fallback while a save commits a newer iteration
// and retention removes older ones. A RaceEnv runs the concurrent save (and
// retention) at a chosen point of the reader's IO, so each race is hit every
// time: the reader must tell a commit or a removal from damage.
// Also load --fallback's HDF5 metadata check (item 5): it promises the newest
// iteration that verifies.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>

#include "ckpt/format/file_meta_hash.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/retention.h"
#include "ckpt/protocol/verify.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;
namespace fs = std::filesystem;

void AddState(OwnedState& s, bool fill) {
  s.Add(Desc("w", DType::kFloat32, {4096}, {0}, {4096}), fill);
  s.AddObject({"rng", {1}, {0}, {}}, "opaque");
}

Status Save(const std::string& root, int64_t iteration) {
  OwnedState s;
  AddState(s, true);
  SaveOptions o;
  o.root = root;
  o.iteration = iteration;
  o.write.chunk_bytes = 4096;
  return SaveCheckpoint(s.dict(), o).status();
}

// A save of `iteration` and retention keeping the newest `keep_last`.
Status SaveAndRetain(const std::string& root, int64_t iteration, int keep_last) {
  CKPT_RETURN_IF_ERROR(Save(root, iteration));
  return ApplyRetention(nullptr, root, iteration, {.keep_last = keep_last}).status();
}

// Runs `action` once, just before the first Stat or OpenFile of a path
// ending in `suffix` (then forwards the call).
class RaceEnv : public EnvWrapper {
 public:
  RaceEnv(std::string suffix, std::function<Status()> action)
      : EnvWrapper(DefaultEnv()), suffix_(std::move(suffix)), action_(std::move(action)) {}
  Result<std::unique_ptr<File>> OpenFile(const std::string& p, OpenMode m, const OpenOptions& o = {}) override {
    Maybe(p);
    return EnvWrapper::OpenFile(p, m, o);
  }
  Result<FileInfo> Stat(const std::string& p) override {
    Maybe(p);
    return EnvWrapper::Stat(p);
  }
  bool fired() const { return fired_; }
  const Status& action_status() const { return status_; }

 private:
  void Maybe(const std::string& p) {
    if (p.size() < suffix_.size() || p.compare(p.size() - suffix_.size(), suffix_.size(), suffix_) != 0) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (fired_.exchange(true)) return;
    status_ = action_();
  }
  std::string suffix_;
  std::function<Status()> action_;
  std::mutex mu_;
  std::atomic<bool> fired_{false};
  Status status_;
};

std::string Joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += x + "\n";
  return s;
}

std::string Issues(const VerifyReport& r) {
  std::string s;
  for (const auto& i : r.issues) s += i.ToString() + "\n";
  return s;
}

const std::string kRank0 = "/iter_0000001/rank_00000.h5";

TEST(VerifyRace, ACommitDuringTheCheckOfLatestIsNotDamage) {
  const std::string root = testing::ScratchDir("verify_race_commit");
  ASSERT_TRUE(Save(root, 1).ok());
  RaceEnv env(kRank0, [&] { return Save(root, 2); });
  auto r = VerifyCheckpoint(&env, root, {});
  ASSERT_TRUE(env.fired() && env.action_status().ok()) << env.action_status().ToString();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << Issues(*r);
  EXPECT_EQ(r->iteration, 1);
  EXPECT_NE(Joined(r->notes).find("iteration 2 was committed"), std::string::npos) << Joined(r->notes);
}

TEST(VerifyRace, LatestRemovedDuringItsCheckVerifiesTheNewLatest) {
  const std::string root = testing::ScratchDir("verify_race_retire_latest");
  ASSERT_TRUE(Save(root, 1).ok());
  RaceEnv env(kRank0, [&] { return SaveAndRetain(root, 2, 1); });
  auto r = VerifyCheckpoint(&env, root, {});
  ASSERT_TRUE(env.fired() && env.action_status().ok()) << env.action_status().ToString();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << Issues(*r);
  EXPECT_FALSE(r->removed);
  EXPECT_EQ(r->iteration, 2);
  EXPECT_NE(Joined(r->notes).find("iteration 1 was removed"), std::string::npos) << Joined(r->notes);
}

TEST(VerifyRace, AGivenIterationRemovedDuringItsCheckIsRemovedNotDamaged) {
  const std::string root = testing::ScratchDir("verify_race_retire_given");
  ASSERT_TRUE(Save(root, 1).ok());
  RaceEnv env(kRank0, [&] { return SaveAndRetain(root, 2, 1); });
  auto r = VerifyCheckpoint(&env, root, {.iteration = 1});
  ASSERT_TRUE(env.fired() && env.action_status().ok()) << env.action_status().ToString();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->ok()) << Issues(*r);
  EXPECT_TRUE(r->removed);
  EXPECT_NE(Joined(r->notes).find("iteration 1 was removed"), std::string::npos) << Joined(r->notes);
  // Absent from the start it is still the caller's error.
  auto absent = VerifyCheckpoint(DefaultEnv(), root, {.iteration = 1});
  ASSERT_FALSE(absent.ok());
  EXPECT_EQ(absent.status().code(), Code::kNotFound) << absent.status().ToString();
}

// verify --all lists, then reads each manifest: an iteration retired between
// the two (its dir renamed away) was reported as a damaged manifest.
TEST(VerifyRace, AManifestWhoseDirIsRemovedMeanwhileIsNotFoundNotCorrupt) {
  const std::string root = testing::ScratchDir("verify_race_manifest");
  ASSERT_TRUE(Save(root, 1).ok());
  RaceEnv env("/iter_0000001/manifest.json", [&] { return SaveAndRetain(root, 2, 1); });
  auto m = ReadManifest(&env, root, 1);
  ASSERT_TRUE(env.fired() && env.action_status().ok()) << env.action_status().ToString();
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kNotFound) << m.status().ToString();
  EXPECT_NE(m.status().message().find("removed"), std::string::npos) << m.status().ToString();
}

TEST(VerifyRace, VerifyAllReportsAnIterationRemovedBeforeItsTurnAsRemoved) {
  const std::string root = testing::ScratchDir("verify_race_all");
  ASSERT_TRUE(Save(root, 1).ok());
  ASSERT_TRUE(Save(root, 2).ok());
  // While iteration 1 is checked, 3 commits and retention keeps 2 and 3... then
  // 4 commits keeping only 4: 2 is gone before its turn.
  RaceEnv env(kRank0, [&] {
    CKPT_RETURN_IF_ERROR(SaveAndRetain(root, 3, 2));
    return SaveAndRetain(root, 4, 1);
  });
  auto all = VerifyAllIterations(&env, root, {});
  ASSERT_TRUE(env.fired() && env.action_status().ok()) << env.action_status().ToString();
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_TRUE(all->ok());
  ASSERT_EQ(all->iterations.size(), 2u);
  for (const auto& it : all->iterations) {
    EXPECT_TRUE(it.error.ok()) << it.error.ToString();
    EXPECT_TRUE(it.report.removed) << it.iteration;
  }
  EXPECT_TRUE(all->latest.ok()) << all->latest.ToString();
}

TEST(VerifyRace, VerifyAllFailsOnAGarbageTrackerAsVerifyAndLoadDo) {
  const std::string root = testing::ScratchDir("verify_race_tracker");
  ASSERT_TRUE(Save(root, 1).ok());
  std::ofstream(JoinPath(root, kTrackerName)) << "x\n";
  auto all = VerifyAllIterations(DefaultEnv(), root, {});
  ASSERT_TRUE(all.ok()) << all.status().ToString();
  EXPECT_FALSE(all->ok());
  EXPECT_EQ(all->latest.code(), Code::kCorruption) << all->latest.ToString();
  auto one = VerifyCheckpoint(DefaultEnv(), root, {});
  ASSERT_FALSE(one.ok());
  EXPECT_EQ(one.status().code(), Code::kCorruption);
}

LoadOptions LoadOpts(const std::string& root, Env* env, bool fallback) {
  LoadOptions o;
  o.root = root;
  o.env = env;
  o.fallback = fallback;
  o.threads = 1;
  return o;
}

// The load picked iteration 2; while it reads, 3 commits and retention keeps
// only 3: both older iterations are gone. That is the root moving on.
void LoadWhileRetired(bool fallback) {
  const std::string root = testing::ScratchDir(fallback ? "load_race_fallback" : "load_race_latest");
  ASSERT_TRUE(Save(root, 1).ok());
  ASSERT_TRUE(Save(root, 2).ok());
  RaceEnv env("/iter_0000002/rank_00000.h5", [&] { return SaveAndRetain(root, 3, 1); });
  OwnedState s;
  AddState(s, false);
  auto r = LoadCheckpoint(s.dict(), LoadOpts(root, &env, fallback));
  ASSERT_TRUE(env.fired() && env.action_status().ok()) << env.action_status().ToString();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->iteration, 3);
  EXPECT_EQ(s.CountMismatches(), 0);
  EXPECT_NE(Joined(r->skipped).find("iter_0000002 was removed while it was loaded"), std::string::npos)
      << Joined(r->skipped);
}

TEST(LoadRace, FallbackLoadsTheNewLatestWhenTheOneItTriedIsRemoved) { LoadWhileRetired(true); }
TEST(LoadRace, LatestLoadLoadsTheNewLatestWhenTheOneItTriedIsRemoved) { LoadWhileRetired(false); }

// Item 5: a flipped byte of HDF5 metadata (outside every chunk) fails verify;
// load --fallback ("the newest one that verifies") must pass it over too.
TEST(LoadFallbackMeta, SkipsAnIterationWhoseMetadataHashFails) {
  const std::string root = testing::ScratchDir("load_fallback_meta");
  ASSERT_TRUE(Save(root, 1).ok());
  ASSERT_TRUE(Save(root, 2).ok());
  auto m = ReadManifest(DefaultEnv(), root, 2);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const auto chunks = ChunkRangesOfFile(*m, 0);
  ASSERT_FALSE(chunks.empty());
  ASSERT_GT(chunks[0].first, 100u);  // byte 100 (superblock / object headers) is metadata
  const std::string file = JoinPath(JoinPath(root, IterDirName(2)), m->files[0].name);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(100);
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x40);
    f.seekp(100);
    f.write(&c, 1);
  }
  auto v = VerifyCheckpoint(DefaultEnv(), root, {.iteration = 2});
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  ASSERT_FALSE(v->ok());  // the premise: verify rejects iteration 2
  OwnedState s;
  AddState(s, false);
  auto r = LoadCheckpoint(s.dict(), LoadOpts(root, nullptr, true));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->iteration, 1);
  EXPECT_NE(Joined(r->skipped).find("HDF5 metadata damaged"), std::string::npos) << Joined(r->skipped);
  // A plain load (no promise to verify) still loads 2: its chunks are intact.
  OwnedState plain;
  AddState(plain, false);
  auto p = LoadCheckpoint(plain.dict(), LoadOpts(root, nullptr, false));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->iteration, 2);
}

}  // namespace
}  // namespace ckpt
