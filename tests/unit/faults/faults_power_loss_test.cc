// Power-loss model: what survives a cut in each mode, name changes by
// identity, replaced and removed files, the cut time, several journals,
// stopping at the cut, and the nosync negative control.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>

#include "faults/fault_env.h"
#include "faults/jobs.h"
#include "faults/power_loss.h"
#include "faults/power_loss_env.h"
#include "harness/test_util.h"

namespace ckpt::faults {
namespace {

class PowerLossTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::ScratchDir("powerloss");
    disk_ = dir_ + "/disk";
    journals_ = dir_ + "/journals";
    ASSERT_TRUE(DefaultEnv()->CreateDir(disk_).ok());
    ASSERT_TRUE(DefaultEnv()->CreateDir(journals_).ok());
  }
  std::unique_ptr<PowerLossEnv> Env(int rank = 0) {
    return std::move(PowerLossEnv::Create(DefaultEnv(), {JournalPath(journals_, rank), CutMarkerPath(journals_), rank}))
        .value();
  }
  PowerLossReport Cut(PowerLossMode mode = PowerLossMode::kDropAll, uint64_t seed = 1) {
    auto r = ApplyPowerLossDir(DefaultEnv(), journals_, mode, seed);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return r.ok() ? *r : PowerLossReport{};
  }
  std::string Read(const std::string& p) {
    auto s = ReadFileToString(DefaultEnv(), p);
    return s.ok() ? *s : "<missing>";
  }
  std::string P(const std::string& name) { return disk_ + "/" + name; }

  std::string dir_, disk_, journals_;
};

Status Write(ckpt::Env* env, const std::string& path, uint64_t off, const std::string& data, bool sync,
             OpenMode mode = OpenMode::kReadWrite) {
  CKPT_ASSIGN_OR_RETURN(auto f, env->OpenFile(path, mode));
  CKPT_RETURN_IF_ERROR(f->PWrite(off, std::as_bytes(std::span(data.data(), data.size()))));
  if (sync) CKPT_RETURN_IF_ERROR(f->Sync());
  return f->Close();
}

TEST_F(PowerLossTest, UnsyncedWritesAreDroppedSyncedOnesStay) {
  auto env = Env();
  ASSERT_TRUE(Write(env.get(), P("f"), 0, "AAAA", true, OpenMode::kCreate).ok());
  ASSERT_TRUE(env->SyncDir(disk_).ok());
  ASSERT_TRUE(Write(env.get(), P("f"), 0, "BB", false).ok());
  ASSERT_TRUE(Write(env.get(), P("f"), 4, "CC", false).ok());
  EXPECT_EQ(Read(P("f")), "BBAACC");
  auto rep = Cut();
  EXPECT_EQ(Read(P("f")), "AAAA");
  EXPECT_EQ(rep.writes_dropped, 2);
}

TEST_F(PowerLossTest, NamesNeedTheirDirectorySynced) {
  auto env = Env();
  ASSERT_TRUE(Write(env.get(), P("synced_data_only"), 0, "x", true, OpenMode::kCreate).ok());
  ASSERT_TRUE(Write(env.get(), P("kept"), 0, "y", true, OpenMode::kCreate).ok());
  ASSERT_TRUE(env->SyncDir(disk_).ok());
  ASSERT_TRUE(Write(env.get(), P("late"), 0, "z", true, OpenMode::kCreate).ok());
  Cut();
  EXPECT_EQ(Read(P("synced_data_only")), "x");  // created before the dir sync
  EXPECT_EQ(Read(P("kept")), "y");
  EXPECT_FALSE(PathExists(P("late")));  // data synced, name not
}

TEST_F(PowerLossTest, UnsyncedRenameComesBackWithTheReplacedFile) {
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), P("tracker"), "10\n").ok());  // before the journal: durable
  auto env = Env();
  ASSERT_TRUE(WriteStringToFileSync(env.get(), P("tracker.tmp"), "20\n").ok());
  ASSERT_TRUE(env->Rename(P("tracker.tmp"), P("tracker")).ok());
  EXPECT_EQ(Read(P("tracker")), "20\n");
  Cut();
  EXPECT_EQ(Read(P("tracker")), "10\n");
  EXPECT_FALSE(PathExists(P("tracker.tmp")));  // its create was not durable either
}

TEST_F(PowerLossTest, WriteFileAtomicSurvives) {
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), P("tracker"), "10\n").ok());
  auto env = Env();
  ASSERT_TRUE(WriteFileAtomic(env.get(), P("tracker"), "20\n").ok());
  Cut();
  EXPECT_EQ(Read(P("tracker")), "20\n");
}

TEST_F(PowerLossTest, DirectoryRenameKeepsWhatWasSyncedInside) {
  auto env = Env();
  ASSERT_TRUE(env->CreateDir(P(".tmp")).ok());  // not synced in disk_ yet
  ASSERT_TRUE(Write(env.get(), P(".tmp/shard"), 0, "data", true, OpenMode::kCreate).ok());
  ASSERT_TRUE(env->SyncDir(P(".tmp")).ok());
  ASSERT_TRUE(env->RenameNoReplace(P(".tmp"), P("iter")).ok());
  ASSERT_TRUE(env->SyncDir(disk_).ok());  // makes the mkdir and the rename durable
  Cut();
  EXPECT_EQ(Read(P("iter/shard")), "data");
  EXPECT_FALSE(PathExists(P(".tmp")));
}

TEST_F(PowerLossTest, UnsyncedMkdirTakesEverythingInside) {
  auto env = Env();
  ASSERT_TRUE(env->CreateDir(P(".tmp")).ok());
  ASSERT_TRUE(Write(env.get(), P(".tmp/shard"), 0, "data", true, OpenMode::kCreate).ok());
  ASSERT_TRUE(env->SyncDir(P(".tmp")).ok());
  ASSERT_TRUE(env->RenameNoReplace(P(".tmp"), P("iter")).ok());
  auto rep = Cut();  // no sync of disk_: neither the mkdir nor the rename happened
  EXPECT_FALSE(PathExists(P("iter")));
  EXPECT_FALSE(PathExists(P(".tmp")));
  EXPECT_EQ(rep.names_undone, 2);  // the rename and the mkdir; the create was durable inside .tmp
}

TEST_F(PowerLossTest, UnsyncedRemoveIsUndone) {
  ASSERT_TRUE(DefaultEnv()->CreateDir(P("stale")).ok());
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), P("stale/f"), "old").ok());
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), P("g"), "gone").ok());
  auto env = Env();
  ASSERT_TRUE(RemoveTree(env.get(), P("stale")).ok());
  ASSERT_TRUE(env->RemoveFile(P("g")).ok());
  ASSERT_TRUE(env->SyncDir(disk_).ok());  // g's and stale's removal durable; stale/f's never synced
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), P("h"), "h").ok());
  auto env2 = Env(1);
  ASSERT_TRUE(env2->RemoveFile(P("h")).ok());  // not synced: comes back
  Cut();
  EXPECT_FALSE(PathExists(P("g")));
  EXPECT_FALSE(PathExists(P("stale")));  // a durably removed directory takes its entries
  EXPECT_EQ(Read(P("h")), "h");
}

TEST_F(PowerLossTest, OperationsAfterTheCutAreUndoneEvenIfSynced) {
  auto env = Env();
  ASSERT_TRUE(Write(env.get(), P("f"), 0, "AAAA", true, OpenMode::kCreate).ok());
  ASSERT_TRUE(env->SyncDir(disk_).ok());
  const int64_t cut = MonotonicNs();
  ASSERT_TRUE(Write(env.get(), P("f"), 0, "BBBB", true).ok());
  ASSERT_TRUE(Write(env.get(), P("g"), 0, "g", true, OpenMode::kCreate).ok());
  ASSERT_TRUE(env->SyncDir(disk_).ok());
  auto rep = ApplyPowerLoss(DefaultEnv(), {JournalPath(journals_, 0)}, cut, PowerLossMode::kKeepPrefix, 3);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(Read(P("f")), "AAAA");
  EXPECT_FALSE(PathExists(P("g")));
}

TEST_F(PowerLossTest, AnotherRanksDirSyncMakesACreateDurable) {
  auto r0 = Env(0), r1 = Env(1);
  ASSERT_TRUE(Write(r1.get(), P("rank_1"), 0, "one", true, OpenMode::kCreate).ok());
  ASSERT_TRUE(Write(r1.get(), P("rank_1b"), 0, "late", true, OpenMode::kCreate).ok());
  // rank 0's sync commits the names rank 1 created before it, not later ones
  ASSERT_TRUE(r0->SyncDir(disk_).ok());
  ASSERT_TRUE(Write(r1.get(), P("rank_1c"), 0, "after", true, OpenMode::kCreate).ok());
  auto rep = ApplyPowerLoss(DefaultEnv(), {JournalPath(journals_, 0), JournalPath(journals_, 1)}, INT64_MAX,
                            PowerLossMode::kDropAll, 1);
  ASSERT_TRUE(rep.ok());
  EXPECT_EQ(Read(P("rank_1")), "one");
  EXPECT_EQ(Read(P("rank_1b")), "late");
  EXPECT_FALSE(PathExists(P("rank_1c")));
}

TEST_F(PowerLossTest, PrefixModeKeepsAPrefixOfTheWrites) {
  std::set<size_t> seen;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    ASSERT_TRUE(RemoveAll(disk_).ok() && RemoveAll(journals_).ok());
    ASSERT_TRUE(CreateDirs(DefaultEnv(), disk_).ok() && CreateDirs(DefaultEnv(), journals_).ok());
    ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), P("f"), "").ok());
    {
      auto env = Env();
      for (int i = 0; i < 5; ++i) ASSERT_TRUE(Write(env.get(), P("f"), uint64_t(i), std::string(1, char('a' + i)), false).ok());
    }
    Cut(PowerLossMode::kKeepPrefix, seed);
    const std::string got = Read(P("f"));
    EXPECT_EQ(got, std::string("abcde").substr(0, got.size())) << "seed " << seed;
    seen.insert(got.size());
  }
  EXPECT_TRUE(seen.count(0) && seen.count(5) && seen.size() >= 4) << seen.size();
}

TEST_F(PowerLossTest, TornModeMixesWholeSectors) {
  const std::string old_bytes(3 * kSectorBytes, 'o'), new_bytes(3 * kSectorBytes, 'n');
  bool mixed = false;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    ASSERT_TRUE(RemoveAll(disk_).ok() && RemoveAll(journals_).ok());
    ASSERT_TRUE(CreateDirs(DefaultEnv(), disk_).ok() && CreateDirs(DefaultEnv(), journals_).ok());
    ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), P("f"), old_bytes).ok());
    {
      auto env = Env();
      ASSERT_TRUE(Write(env.get(), P("f"), 0, new_bytes, false).ok());
    }
    Cut(PowerLossMode::kTornSectors, seed);
    const std::string got = Read(P("f"));
    ASSERT_EQ(got.size(), old_bytes.size());
    std::set<char> kinds;
    for (size_t s = 0; s < 3; ++s) {
      const std::string sector = got.substr(s * kSectorBytes, kSectorBytes);
      EXPECT_TRUE(sector == old_bytes.substr(0, kSectorBytes) || sector == new_bytes.substr(0, kSectorBytes));
      kinds.insert(sector[0]);
    }
    mixed = mixed || kinds.size() == 2;
  }
  EXPECT_TRUE(mixed);
}

TEST_F(PowerLossTest, ATornJournalTailIsIgnored) {
  {
    auto env = Env();
    ASSERT_TRUE(Write(env.get(), P("f"), 0, "AAAA", false, OpenMode::kCreate).ok());
  }
  std::ofstream(JournalPath(journals_, 0), std::ios::app) << "half a rec";
  Cut();
  EXPECT_FALSE(PathExists(P("f")));
}

TEST_F(PowerLossTest, TheCutStopsEveryProcessAtItsNextOperation) {
  pid_t pid = fork();
  if (pid == 0) {
    auto env = Env();
    env->Cut();
    env->Stat(disk_).status().IgnoreError();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kPowerCutExitCode);
  auto cut = ReadCutMarker(CutMarkerPath(journals_));
  ASSERT_TRUE(cut.ok());
  EXPECT_LT(*cut, INT64_MAX);
}

TEST_F(PowerLossTest, NosyncNegativeControlLosesACommittedFile) {
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), P("tracker"), "10\n").ok());
  auto pl = Env();
  FaultEnv::Options o;
  o.plan.disable_sync = true;
  FaultEnv lying(pl.get(), o);
  ASSERT_TRUE(WriteFileAtomic(&lying, P("tracker"), "20\n").ok());  // "succeeds"
  Cut();
  EXPECT_EQ(Read(P("tracker")), "10\n");
}

}  // namespace
}  // namespace ckpt::faults
