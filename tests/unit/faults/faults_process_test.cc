// Child processes of the campaign runner: exit codes, wall-clock limits that
// kill ranks in process groups of their own (as mpirun starts them), early stop.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <fstream>

#include "faults/jobs.h"
#include "faults/process.h"
#include "harness/test_util.h"

namespace ckpt::faults {
namespace {

TEST(RunProcess, ReportsTheExitCode) {
  auto r = RunProcess({"sh", "-c", "exit 3"}, {});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->exit_code, 3);
  EXPECT_FALSE(r->timed_out);
}

TEST(RunProcess, TimeoutKillsDescendantsInOtherGroups) {
  const std::string dir = testing::ScratchDir("proc");
  ProcOptions o;
  o.timeout_s = 0.5;
  // Like mpirun: the "rank" runs in a session and group of its own.
  auto r = RunProcess({"sh", "-c", "setsid sh -c 'echo $$ > " + dir + "/pid; exec sleep 30' & sleep 30"}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->timed_out);
  EXPECT_LT(r->seconds, 5);
  int pid = 0;
  std::ifstream(dir + "/pid") >> pid;
  ASSERT_GT(pid, 0);
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(RunProcess, StopsOnceTheEvidenceIsIn) {
  const std::string dir = testing::ScratchDir("proc_early");
  ProcOptions o;
  o.timeout_s = 20;
  o.done_early = [&] { return PathExists(dir + "/done"); };
  auto r = RunProcess({"sh", "-c", "touch " + dir + "/done; sleep 30"}, o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stopped_early);
  EXPECT_FALSE(r->timed_out);
  EXPECT_LT(r->seconds, 5);
}

TEST(RunProcess, SplitsCommandPrefixes) {
  EXPECT_EQ(SplitWords("  mpirun  --oversubscribe\t-np "), (std::vector<std::string>{"mpirun", "--oversubscribe", "-np"}));
  EXPECT_EQ(WorldOf("tp=2,pp=2,dp=2"), 8);
  EXPECT_EQ(WorldOf("nonsense"), 0);
}

}  // namespace
}  // namespace ckpt::faults
