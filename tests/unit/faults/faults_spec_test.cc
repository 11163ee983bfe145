// Fault plan text: grammar, validation, round trip; boundary selection and
// trace comparison; deadline scenario names.
#include <gtest/gtest.h>

#include "faults/boundaries.h"
#include "faults/deadline.h"
#include "faults/fault_spec.h"
#include "harness/test_util.h"

namespace ckpt::faults {
namespace {

TEST(FaultSpec, ParsesRulesCommentsAndSwitches) {
  auto plan = ParseFaultPlan(
      "point=env.fsync rank=1 nth=2 action=eio persistent  # a dead disk\n"
      "point=step.vote,rank=3,action=sigkill; nosync\n"
      "\n"
      "point=env.pwrite path=rank_00002 nth=5 action=short bytes=100\n"
      "point=step.commit action=bitflip file=manifest chunk=last\n");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  ASSERT_EQ(plan->rules.size(), 4u);
  EXPECT_TRUE(plan->disable_sync);
  const FaultRule& a = plan->rules[0];
  EXPECT_EQ(a.point, "env.fsync");
  EXPECT_EQ(a.rank, 1);
  EXPECT_EQ(a.nth, 2);
  EXPECT_TRUE(a.persistent);
  EXPECT_EQ(a.action, Action::kEio);
  EXPECT_EQ(plan->rules[1].action, Action::kSigkill);
  EXPECT_EQ(plan->rules[1].nth, 1);  // default
  EXPECT_EQ(plan->rules[2].path, "rank_00002");
  EXPECT_EQ(plan->rules[2].bytes, 100);
  EXPECT_EQ(plan->rules[3].rank, -1);  // every rank
  EXPECT_EQ(plan->rules[3].file, "manifest");
  EXPECT_EQ(plan->rules[3].chunk, "last");
}

TEST(FaultSpec, RoundTripsThroughToString) {
  auto plan = ParseFaultPlan("point=env.pwrite rank=2 nth=7 action=short bytes=9; point=step.plan action=delay ms=30;"
                             "point=env.rename action=enospc persistent; nosync");
  ASSERT_TRUE(plan.ok());
  auto again = ParseFaultPlan(plan->ToString());
  ASSERT_TRUE(again.ok()) << plan->ToString();
  EXPECT_EQ(again->ToString(), plan->ToString());
  EXPECT_TRUE(again->disable_sync);
  EXPECT_EQ(again->rules[1].ms, 30);
}

TEST(FaultSpec, RejectsBadRulesWithReasons) {
  const char* bad[] = {
      "point=env.nope action=eio",          // unknown point
      "point=env.fsync",                    // no action
      "action=eio",                         // no point
      "point=env.fsync action=explode",     // unknown action
      "point=env.fsync action=short",       // short only on pwrite
      "point=env.fsync action=crash persistent",
      "point=env.fsync nth=0 action=eio",
      "point=env.fsync rank=x action=eio",
      "point=env.fsync action=eio colour=red",
      "point=env.fsync action=eio chunk=middle",
  };
  for (const char* text : bad) {
    auto plan = ParseFaultPlan(text);
    EXPECT_FALSE(plan.ok()) << text;
    EXPECT_EQ(plan.status().code(), Code::kInvalidArgument) << text;
  }
  EXPECT_TRUE(ParseFaultPlan("").ok());
  EXPECT_TRUE(ParseFaultPlan("  # only a comment\n;;").ok());
}

TEST(FaultSpec, LoadsAFile) {
  const std::string dir = testing::ScratchDir("faults_spec");
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), dir + "/plan", "point=env.mkdir action=eio\n").ok());
  auto plan = LoadFaultPlanFile(DefaultEnv(), dir + "/plan");
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->rules.at(0).point, "env.mkdir");
  ASSERT_TRUE(WriteStringToFileSync(DefaultEnv(), dir + "/bad", "point=env.mkdir\n").ok());
  auto bad = LoadFaultPlanFile(DefaultEnv(), dir + "/bad");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find(dir + "/bad"), std::string::npos);
}

TEST(FaultSpec, EveryStepHookStepIsAPoint) {
  for (const char* s : {"begin", "plan", "shard_write", "shard_fsync", "vote", "manifest_write", "manifest_rename",
                        "dir_rename", "root_fsync", "tracker_update", "commit"})
    EXPECT_TRUE(IsKnownPoint(std::string("step.") + s)) << s;
}

std::vector<TraceEntry> SampleTrace(const std::string& root, const std::string& nonce) {
  const std::string tmp = root + "/.iter_0000020.tmp-" + nonce;
  std::vector<TraceEntry> t = {{1, "step.plan", 1, "", 0, 0}, {2, "env.open", 1, tmp + "/rank_00001.h5", 0, 0}};
  for (int i = 0; i < 7; ++i) t.push_back({3 + i, "env.pwrite", i + 1, tmp + "/rank_00001.h5", uint64_t(i) * 8, 8});
  t.push_back({10, "env.fsync", 1, tmp + "/rank_00001.h5", 0, 0});
  t.push_back({11, "env.pwrite", 8, root + "/other", 0, 4});
  return t;
}

TEST(Boundaries, SmartKeepsNonWritesAndFirstMiddleLastWritePerFile) {
  auto t = SampleTrace("/r", "0123456789abcdef");
  auto bs = SelectBoundaries({{}, t}, "/r", BoundaryRule::kSmart, {}, {}, true);
  std::vector<std::string> names;
  for (const auto& b : bs) names.push_back(b.Name());
  const std::vector<std::string> want = {
      "r1 step.plan#1", "r1 env.open#1 .iter_0000020.tmp-*/rank_00001.h5",
      "r1 env.fsync#1 .iter_0000020.tmp-*/rank_00001.h5", "r1 env.pwrite#1 .iter_0000020.tmp-*/rank_00001.h5",
      "r1 env.pwrite#4 .iter_0000020.tmp-*/rank_00001.h5", "r1 env.pwrite#7 .iter_0000020.tmp-*/rank_00001.h5",
      "r1 env.pwrite#8 other", "end"};
  EXPECT_EQ(names, want);
  EXPECT_EQ(SelectBoundaries({t}, "/r", BoundaryRule::kAll, {}, {}, false).size(), t.size());
  EXPECT_EQ(SelectBoundaries({t, t}, "/r", BoundaryRule::kAll, {"env.fsync", "end"}, {1}, true).size(), 2u);
}

TEST(Boundaries, TracesCompareModuloRootAndNonce) {
  auto a = SampleTrace("/x/root", "00000000000000aa"), b = SampleTrace("/y/root", "ffffffffffffff00");
  std::string diff;
  EXPECT_TRUE(SameTrace(a, "/x/root", b, "/y/root", &diff)) << diff;
  b[4].bytes = 9;
  EXPECT_FALSE(SameTrace(a, "/x/root", b, "/y/root", &diff));
  EXPECT_NE(diff.find("op 5"), std::string::npos) << diff;
  b.pop_back();
  EXPECT_FALSE(SameTrace(a, "/x/root", b, "/y/root", &diff));
}

TEST(Boundaries, TraceJsonRoundTrip) {
  auto t = SampleTrace("/r", "0123");
  auto back = TraceFromJsonLines(TraceToJsonLines(t));
  ASSERT_TRUE(back.ok());
  ASSERT_EQ(back->size(), t.size());
  EXPECT_EQ((*back)[3].point, "env.pwrite");
  EXPECT_EQ((*back)[3].nth, 2);
  EXPECT_EQ((*back)[3].offset, 8u);
  EXPECT_FALSE(TraceFromJsonLines("{\"seq\":1}\n").ok());
}

TEST(DeadlineScenario, NamesParseBack) {
  for (const auto& s : DefaultDeadlineScenarios(8)) {
    auto back = ParseDeadlineScenario(s.Name());
    ASSERT_TRUE(back.ok()) << s.Name();
    EXPECT_EQ(back->Name(), s.Name());
  }
  EXPECT_TRUE(ParseDeadlineScenario("save:eio@step.plan#1:r1=plan").ok());
  EXPECT_FALSE(ParseDeadlineScenario("save:crash@step.vote#1:r1=vote").ok());  // only hang / sigkill / eio
  EXPECT_FALSE(ParseDeadlineScenario("save:hang@step.nope#1:r1=vote").ok());
  EXPECT_FALSE(ParseDeadlineScenario("hang").ok());
}

}  // namespace
}  // namespace ckpt::faults
