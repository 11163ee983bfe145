// Stale-save cleanup across nodes sharing a root (issue 31 item 4d): a node
// restarted with the same hostname and reused pids names its tmp dirs exactly
// like the other node's. The cleanup must still never remove a live save and
// never keep a dead one: it decides by the lease (the flock on the tmp dir,
// dir_lock.h) alone, never by the host or pid in the name. Other processes
// stand in for the other node: one holds its save's lease, one was SIGKILLed
// holding it, both with this process's own host and pid in their dir names.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "ckpt/base/dir_lock.h"
#include "ckpt/base/env.h"
#include "ckpt/protocol/commit.h"

namespace ckpt {
namespace {

namespace fs = std::filesystem;

// A process that takes the lease on `dir`, says so on a pipe and holds it
// until killed.
pid_t HoldLease(const std::string& dir) {
  int p[2];
  if (::pipe(p) != 0) return -1;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(p[0]);
    auto lock = DirLock::TryLock(dir);
    const char ok = lock.ok() ? '1' : '0';
    if (::write(p[1], &ok, 1) != 1) ::_exit(2);
    for (;;) ::pause();
  }
  ::close(p[1]);
  char got = 0;
  const bool held = ::read(p[0], &got, 1) == 1 && got == '1';
  ::close(p[0]);
  return held ? pid : -1;
}

void Kill(pid_t pid) {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

TEST(StaleLeaseTest, SameHostAndPidNeverDecide) {
  const std::string root = ::testing::TempDir() + "stale_lease_" + std::to_string(::getpid());
  fs::remove_all(root);
  fs::create_directories(root);
  // Both names carry this process's own "<host>-<pid>": a restarted node that
  // reuses the hostname and the pid cannot tell them from its own by name.
  const std::string live = root + "/.iter_0000005.tmp-" + ProcessOwnerTag() + "-aaaa";
  const std::string dead = root + "/.iter_0000004.tmp-" + ProcessOwnerTag() + "-bbbb";
  fs::create_directories(live);
  fs::create_directories(dead);
  const pid_t live_owner = HoldLease(live);
  const pid_t dead_owner = HoldLease(dead);
  ASSERT_GT(live_owner, 0);
  ASSERT_GT(dead_owner, 0);
  Kill(dead_owner);  // the node died mid-save: the kernel drops its lease

  auto tmp6 = PrepareSaveDir(DefaultEnv(), root, 6, nullptr);  // the StagedSave holds the lease
  ASSERT_TRUE(tmp6.ok()) << tmp6.status().ToString();
  EXPECT_TRUE(fs::exists(live)) << "a live save of another node was removed";
  EXPECT_FALSE(fs::exists(dead)) << "a dead save was kept";

  // A second save of the live one's iteration is refused, naming its owner.
  auto tmp5 = PrepareSaveDir(DefaultEnv(), root, 5, nullptr);  // the StagedSave holds the lease
  ASSERT_FALSE(tmp5.ok());
  EXPECT_EQ(tmp5.status().code(), Code::kAlreadyExists) << tmp5.status().ToString();
  EXPECT_NE(tmp5.status().message().find("pid " + std::to_string(::getpid())), std::string::npos)
      << tmp5.status().message();

  // Once that node is gone too, the next save removes its tmp dir, and
  // leaves alone the one this process still holds (same host, same pid).
  Kill(live_owner);
  auto tmp7 = PrepareSaveDir(DefaultEnv(), root, 7, nullptr);  // the StagedSave holds the lease
  ASSERT_TRUE(tmp7.ok()) << tmp7.status().ToString();
  EXPECT_FALSE(fs::exists(live)) << "a dead save was kept";
  EXPECT_TRUE(fs::exists((*tmp6)->dir())) << "this process's own live save was removed";
  fs::remove_all(root);
}

}  // namespace
}  // namespace ckpt
