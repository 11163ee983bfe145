// FaultEnv: counting by (point, rank, nth), every action, the nosync switch,
// traces, step hooks; and an in-process sweep that fails every operation of
// a single-process save and requires the loader to return old or new.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "ckpt/protocol/checkpoint.h"
#include "reshard/parallel_state.h"
#include "ckpt/protocol/verify.h"
#include "faults/fault_env.h"
#include "faults/inplace_storage.h"
#include "faults/jobs.h"
#include "faults/oracle.h"
#include "harness/test_util.h"
#include "ckpt/workload/gpt_local_state.h"

namespace ckpt::faults {
namespace {

FaultEnv MakeEnv(const std::string& spec, int rank = 0, Env* target = DefaultEnv()) {
  FaultEnv::Options o;
  o.rank = rank;
  o.plan = *ParseFaultPlan(spec);
  o.record_trace = true;
  return FaultEnv(target, o);
}

Status WriteAt(Env* env, const std::string& path, uint64_t off, const std::string& data) {
  CKPT_ASSIGN_OR_RETURN(auto f, env->OpenFile(path, off == 0 ? OpenMode::kCreate : OpenMode::kReadWrite));
  CKPT_RETURN_IF_ERROR(f->PWrite(off, std::as_bytes(std::span(data.data(), data.size()))));
  return f->Close();
}

TEST(FaultEnv, FiresAtTheNthMatchingCallOnce) {
  const std::string dir = testing::ScratchDir("fenv_nth");
  FaultEnv env = MakeEnv("point=env.mkdir nth=2 action=eio");
  EXPECT_TRUE(env.CreateDir(dir + "/a").ok());
  Status st = env.CreateDir(dir + "/b");
  EXPECT_EQ(st.code(), Code::kIOError);
  EXPECT_NE(st.message().find("env.mkdir #2"), std::string::npos) << st.ToString();
  EXPECT_FALSE(DefaultEnv()->Stat(dir + "/b")->exists);  // the failed call did nothing
  EXPECT_TRUE(env.CreateDir(dir + "/c").ok());             // once: the next call works
  EXPECT_EQ(env.fired(), 1);
}

TEST(FaultEnv, PersistentErrorsKeepFailing) {
  const std::string dir = testing::ScratchDir("fenv_persist");
  FaultEnv env = MakeEnv("point=env.mkdir nth=2 action=enospc persistent");
  EXPECT_TRUE(env.CreateDir(dir + "/a").ok());
  for (const char* n : {"/b", "/c", "/d"}) EXPECT_EQ(env.CreateDir(dir + n).code(), Code::kNoSpace);
  EXPECT_EQ(env.fired(), 3);
}

TEST(FaultEnv, EnospcOnceOnAnyOperation) {
  const std::string dir = testing::ScratchDir("fenv_enospc");
  FaultEnv env = MakeEnv("point=env.rename action=enospc; point=env.fsync action=enospc");
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), dir + "/a", "x").ok());
  EXPECT_EQ(env.Rename(dir + "/a", dir + "/b").code(), Code::kNoSpace);
  EXPECT_TRUE(PathExists(dir + "/a"));
  EXPECT_TRUE(env.Rename(dir + "/a", dir + "/b").ok());
  EXPECT_EQ(WriteStringToFileSync(&env, dir + "/c", "y").code(), Code::kNoSpace);
  EXPECT_TRUE(WriteStringToFileSync(&env, dir + "/c", "y").ok());
}

TEST(FaultEnv, RankAndPathFilters) {
  const std::string dir = testing::ScratchDir("fenv_filter");
  FaultEnv other = MakeEnv("point=env.mkdir rank=1 action=eio", /*rank=*/0);
  EXPECT_TRUE(other.CreateDir(dir + "/a").ok());
  FaultEnv env = MakeEnv("point=env.mkdir path=target nth=2 action=eio", 1);
  EXPECT_TRUE(env.CreateDir(dir + "/target1").ok());
  EXPECT_TRUE(env.CreateDir(dir + "/x").ok());  // does not match: not counted
  EXPECT_FALSE(env.CreateDir(dir + "/target2").ok());
}

TEST(FaultEnv, ShortWriteLeavesAPrefixAndFails) {
  const std::string dir = testing::ScratchDir("fenv_short");
  FaultEnv env = MakeEnv("point=env.pwrite nth=1 action=short bytes=3; point=env.pwrite nth=2 action=short");
  Status st = WriteAt(&env, dir + "/f", 0, "abcdefgh");
  EXPECT_EQ(st.code(), Code::kNoSpace);
  EXPECT_NE(st.message().find("wrote 3 of 8 bytes"), std::string::npos) << st.ToString();
  EXPECT_EQ(*ReadFileToString(DefaultEnv(), dir + "/f"), "abc");
  EXPECT_EQ(WriteAt(&env, dir + "/g", 0, "abcdefgh").code(), Code::kNoSpace);
  EXPECT_EQ(*ReadFileToString(DefaultEnv(), dir + "/g"), "abcd");  // default: half
}

TEST(FaultEnv, DelayThenProceed) {
  const std::string dir = testing::ScratchDir("fenv_delay");
  FaultEnv env = MakeEnv("point=env.mkdir action=delay ms=120");
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_TRUE(env.CreateDir(dir + "/a").ok());
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(120));
  EXPECT_TRUE(DefaultEnv()->Stat(dir + "/a")->exists);
}

// Counts the syncs that reach the real Env.
class SyncCounter : public EnvWrapper {
 public:
  SyncCounter() : EnvWrapper(DefaultEnv()) {}
  Status SyncDir(const std::string& p) override {
    ++dir_syncs;
    return EnvWrapper::SyncDir(p);
  }
  int dir_syncs = 0;
};

TEST(FaultEnv, NosyncSwallowsSyncs) {
  const std::string dir = testing::ScratchDir("fenv_nosync");
  SyncCounter counter;
  FaultEnv env = MakeEnv("nosync", 0, &counter);
  EXPECT_TRUE(env.sync_disabled());
  EXPECT_TRUE(WriteFileAtomic(&env, dir + "/f", "x").ok());
  EXPECT_EQ(counter.dir_syncs, 0);
  FaultEnv honest = MakeEnv("", 0, &counter);
  EXPECT_TRUE(WriteFileAtomic(&honest, dir + "/g", "y").ok());
  EXPECT_EQ(counter.dir_syncs, 1);
  int syncs = 0;
  for (const auto& e : env.Trace()) syncs += e.point == "env.fsync" || e.point == "env.syncdir";
  EXPECT_EQ(syncs, 2);  // still counted (and injectable)
}

TEST(FaultEnv, TraceAndStepHook) {
  const std::string dir = testing::ScratchDir("fenv_trace");
  FaultEnv env = MakeEnv("point=step.vote nth=2 action=eio");
  std::vector<std::string> chained;
  StepHook hook = env.Hook([&](std::string_view s, int) {
    chained.emplace_back(s);
    return Status::Ok();
  });
  EXPECT_TRUE(hook("vote", 0).ok());
  EXPECT_EQ(hook("vote", 0).code(), Code::kIOError);
  EXPECT_TRUE(WriteAt(&env, dir + "/f", 0, "abc").ok());
  EXPECT_EQ(chained.size(), 2u);
  auto t = env.Trace();
  ASSERT_EQ(t.size(), 5u);  // step.vote x2, open, pwrite, close
  EXPECT_EQ(t[1].point, "step.vote");
  EXPECT_EQ(t[1].nth, 2);
  EXPECT_EQ(t[3].point, "env.pwrite");
  EXPECT_EQ(t[3].bytes, 3u);
  EXPECT_EQ(t[4].seq, 5);
}

// Runs `body` in a child process; returns its wait status.
int InChild(const std::function<void()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

std::string g_atexit_marker;
void AtExit() {
  if (!g_atexit_marker.empty()) WriteStringToFileSync(DefaultEnv(), g_atexit_marker, "ran").IgnoreError();
}

TEST(FaultEnv, CrashExitsWithoutCleanup) {
  const std::string dir = testing::ScratchDir("fenv_crash");
  int status = InChild([&] {
    g_atexit_marker = dir + "/atexit";
    std::atexit(AtExit);
    FaultEnv env = MakeEnv("point=env.mkdir action=crash");
    env.CreateDir(dir + "/a").IgnoreError();
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), kCrashExitCode);
  EXPECT_FALSE(PathExists(dir + "/atexit"));  // no atexit handlers, no flushing
  EXPECT_FALSE(PathExists(dir + "/a"));       // the operation never started
}

TEST(FaultEnv, SigkillKillsTheProcess) {
  const std::string dir = testing::ScratchDir("fenv_kill");
  int status = InChild([&] {
    FaultEnv env = MakeEnv("point=env.stat action=sigkill");
    env.Stat(dir).status().IgnoreError();
  });
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
}

TEST(FaultEnv, HangNeverReturns) {
  const std::string dir = testing::ScratchDir("fenv_hang");
  pid_t pid = fork();
  if (pid == 0) {
    FaultEnv env = MakeEnv("point=env.stat action=hang");
    env.Stat(dir).status().IgnoreError();
    _exit(0);
  }
  usleep(400 * 1000);
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, WNOHANG), 0);  // still in there
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
}

// ---- an in-process campaign over a single-process save ----

struct Gpt {
  reshard::GptConfig cfg;
  std::unique_ptr<workload::GptLocalState> state;
};

Gpt MakeGpt() {
  Gpt g;
  g.cfg = *reshard::GptPreset("tiny");
  g.cfg.num_layers = 2;
  ParallelConfig pc = *ParallelConfig::Parse("tp=1");
  auto shards = *reshard::GptShards(g.cfg, pc, *CoordsOf(pc, 0));
  g.state = std::make_unique<workload::GptLocalState>(*workload::GptLocalState::Create(std::move(shards)));
  return g;
}

// The save's error, else its post-commit warning (*committed: it committed).
Status SaveGpt(const std::string& root, int64_t iter, Env* env, StepHook hook = nullptr, bool* committed = nullptr,
               Storage* storage = nullptr) {
  Gpt g = MakeGpt();
  CKPT_RETURN_IF_ERROR(FillForIteration(*g.state, g.cfg.vocab_size, iter));
  SaveOptions o;
  o.root = root;
  o.iteration = iter;
  o.env = env;
  o.write.chunk_bytes = 16 << 10;
  o.hook = std::move(hook);
  o.storage = storage;
  ShardedStateDict sd = g.state->StateDict();
  auto r = SaveCheckpoint(sd, o);
  if (committed) *committed = r.ok();
  return r.ok() ? r->warning : r.status();
}

// The loaded iteration if every element is that iteration's, else an error.
Result<int64_t> LoadGpt(const std::string& root, bool fallback = false) {
  Gpt g = MakeGpt();
  LoadOptions o;
  o.root = root;
  o.fallback = fallback;
  auto latest = LatestIteration(DefaultEnv(), root);  // what `ckpt load` asks for
  if (latest.ok()) o.iteration = *latest;
  ShardedStateDict sd = g.state->StateDict();
  CKPT_ASSIGN_OR_RETURN(LoadStats st, LoadCheckpoint(sd, o));
  std::string first;
  CKPT_ASSIGN_OR_RETURN(int64_t bad, MismatchesForIteration(*g.state, g.cfg.vocab_size, st.iteration, &first));
  if (bad) return Status::Internal("torn: " + std::to_string(bad) + " wrong, first " + first);
  return st.iteration;
}

TEST(FaultEnvSweep, EveryFailedOperationLeavesOldOrNew) {
  const std::string base = testing::ScratchDir("sweep") + "/base";
  ASSERT_TRUE(SaveGpt(base, 10, DefaultEnv()).ok());
  const std::string traced = base + ".traced";
  ASSERT_TRUE(CloneTree(base, traced).ok());
  FaultEnv tracer = MakeEnv("");
  ASSERT_TRUE(SaveGpt(traced, 20, &tracer, tracer.Hook()).ok());
  const auto trace = tracer.Trace();
  ASSERT_GT(trace.size(), 20u);
  int old_count = 0, new_count = 0;
  for (const char* mode : {"", " persistent"}) {
    for (const auto& e : trace) {
      const std::string root = base + ".case";
      ASSERT_TRUE(RemoveAll(root).ok());
      ASSERT_TRUE(CloneTree(base, root).ok());
      FaultEnv env = MakeEnv("point=" + e.point + " nth=" + std::to_string(e.nth) + " action=eio" + mode);
      bool committed = false;
      Status saved = SaveGpt(root, 20, &env, env.Hook(), &committed);
      EXPECT_GE(env.fired(), 1) << e.point << "#" << e.nth;
      // An injected error is never swallowed: a failed save, or (after the
      // commit point) a committed save's warning.
      EXPECT_FALSE(saved.ok()) << e.point << "#" << e.nth;
      auto loaded = LoadGpt(root);
      ASSERT_TRUE(loaded.ok()) << e.point << "#" << e.nth << mode << ": " << loaded.status().ToString();
      EXPECT_TRUE(*loaded == 10 || *loaded == 20) << *loaded;
      if (committed) {
        EXPECT_EQ(*loaded, 20) << e.point << "#" << e.nth << mode << ": committed, so latest";
      }
      (*loaded == 10 ? old_count : new_count)++;
    }
  }
  EXPECT_GT(old_count, 0);
  EXPECT_GT(new_count, 0);  // faults after the commit point keep the new checkpoint
}

// The M115 control's backend (inplace_storage.h) against the atomic commit:
// a save failing before its manifest leaves an incomplete iter_20/ in the
// root (listed; the loader skips it for its missing manifest and loads 10),
// where the atomic one leaves nothing there; a failure between the tracker's
// truncation and its write leaves the tracker empty, which the loader
// refuses (kCorruption naming it) instead of guessing.
TEST(InPlaceCommit, AFailedSaveLeavesAnIncompleteIterDirTheAtomicOneDoesNot) {
  const std::string dir = testing::ScratchDir("inplace_commit");
  ASSERT_TRUE(SaveGpt(dir + "/base", 10, DefaultEnv()).ok());
  for (bool in_place : {false, true}) {
    const std::string root = dir + (in_place ? "/inplace" : "/atomic");
    ASSERT_TRUE(CloneTree(dir + "/base", root).ok());
    FaultEnv env = MakeEnv("point=step.vote action=eio");
    auto storage = in_place ? NewInPlaceStorage(&env, root) : nullptr;
    EXPECT_FALSE(SaveGpt(root, 20, &env, env.Hook(), nullptr, storage.get()).ok());
    const std::string iter20 = JoinPath(root, IterDirName(20));
    EXPECT_EQ(PathExists(iter20), in_place) << root;
    EXPECT_EQ(PathExists(JoinPath(iter20, ShardFileName(0))), in_place) << root;
    EXPECT_FALSE(PathExists(JoinPath(iter20, kManifestName))) << root;
    auto loaded = LoadGpt(root);
    ASSERT_TRUE(loaded.ok()) << root << ": " << loaded.status().ToString();
    EXPECT_EQ(*loaded, 10) << root;
  }
  // The tracker's write is the last pwrite of a clean in-place save.
  const std::string traced = dir + "/traced";
  ASSERT_TRUE(CloneTree(dir + "/base", traced).ok());
  FaultEnv tracer = MakeEnv("");
  auto tracing = NewInPlaceStorage(&tracer, traced);
  ASSERT_TRUE(SaveGpt(traced, 20, &tracer, tracer.Hook(), nullptr, tracing.get()).ok());
  auto clean = LoadGpt(traced);
  ASSERT_TRUE(clean.ok()) << clean.status().ToString();
  EXPECT_EQ(*clean, 20);
  int64_t last_write = -1;
  for (const auto& e : tracer.Trace())
    if (e.point == "env.pwrite") last_write = e.nth;
  ASSERT_GE(last_write, 0);
  const std::string root = dir + "/torn_tracker";
  ASSERT_TRUE(CloneTree(dir + "/base", root).ok());
  FaultEnv env = MakeEnv("point=env.pwrite nth=" + std::to_string(last_write) + " action=eio");
  auto storage = NewInPlaceStorage(&env, root);
  bool committed = false;
  EXPECT_FALSE(SaveGpt(root, 20, &env, env.Hook(), &committed, storage.get()).ok());  // the tracker warning
  EXPECT_TRUE(committed);
  auto tracker = DefaultEnv()->Stat(JoinPath(root, kTrackerName));
  ASSERT_TRUE(tracker.ok() && tracker->exists);
  EXPECT_EQ(tracker->size, 0u);
  auto latest = LatestIteration(DefaultEnv(), root);
  ASSERT_FALSE(latest.ok());
  EXPECT_EQ(latest.status().code(), Code::kCorruption) << latest.status().ToString();
  EXPECT_NE(latest.status().message().find(kTrackerName), std::string::npos) << latest.status().ToString();
}

TEST(FaultEnvSweep, DamageActionAtCommitIsCaught) {
  const std::string root = testing::ScratchDir("damage_action") + "/root";
  ASSERT_TRUE(SaveGpt(root, 10, DefaultEnv()).ok());
  FaultEnv::Options o;
  o.plan = *ParseFaultPlan("point=step.commit action=bitflip chunk=last");
  o.root = root;
  o.iteration = 20;
  FaultEnv env(DefaultEnv(), o);
  ASSERT_TRUE(SaveGpt(root, 20, &env, env.Hook()).ok());
  auto report = VerifyCheckpoint(DefaultEnv(), root, {});
  ASSERT_TRUE(report.ok());
  ASSERT_EQ(report->issues.size(), 1u);
  EXPECT_NE(report->issues[0].file.find("rank_00000.h5"), std::string::npos);
  EXPECT_NE(report->issues[0].problem.find("sha256 mismatch"), std::string::npos);
  EXPECT_FALSE(LoadGpt(root).ok());
  EXPECT_EQ(*LoadGpt(root, /*fallback=*/true), 10);
}

}  // namespace
}  // namespace ckpt::faults
