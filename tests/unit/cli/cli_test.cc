// The `ckpt` binary: exit codes and what it prints (inspect, verify).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;

using testing::CmdResult;
CmdResult Ckpt(const std::string& args) { return testing::RunCkpt(args); }

std::string MakeCheckpoint() {
  const std::string root = testing::ScratchDir("cli");
  OwnedState s;
  s.Add(Desc("decoder.layers.0.mlp.linear_fc1.weight", DType::kBFloat16, {128, 64}, {0, 0}, {128, 64}), true);
  s.Add(Desc("decoder.final_layernorm.weight", DType::kFloat32, {64}, {0}, {64}), true);
  SaveOptions o;
  o.root = root;
  o.iteration = 12;
  o.write.chunk_bytes = 2048;
  o.layout = {{"tp", 1}, {"pp", 1}, {"dp", 1}};
  EXPECT_TRUE(SaveCheckpoint(s.dict(), o).ok());
  return root;
}

TEST(CliTest, InspectShowsTensorsAndLayout) {
  const std::string root = MakeCheckpoint();
  CmdResult r = Ckpt("inspect " + root);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("decoder.layers.0.mlp.linear_fc1.weight"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[128, 64]"), std::string::npos) << r.out;
  r = Ckpt("inspect --json " + root);
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["iteration"], 12);
  EXPECT_EQ(j["layout"]["tp"], 1);
  EXPECT_EQ(j["tensors"].size(), 2u);
}

TEST(CliTest, VerifyExitCodes) {
  const std::string root = MakeCheckpoint();
  CmdResult r = Ckpt("verify " + root);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("OK"), std::string::npos);

  auto m = ReadManifest(DefaultEnv(), root, -1);
  ASSERT_TRUE(m.ok());
  const auto& shard = m->shards[0].meta.key == "decoder.layers.0.mlp.linear_fc1.weight" ? m->shards[0] : m->shards[1];
  const ChunkRecord& c = shard.record.chunks[3];
  {
    std::fstream f(root + "/" + IterDirName(12) + "/" + m->files[0].name, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(c.file_offset + 1));
    char b = char(f.get() ^ 0x20);
    f.seekp(std::streamoff(c.file_offset + 1));
    f.put(b);
  }
  r = Ckpt("verify " + root);
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("tensor 'decoder.layers.0.mlp.linear_fc1.weight'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("chunk 3"), std::string::npos) << r.out;
  r = Ckpt("verify --json " + root);
  EXPECT_EQ(r.code, 1);
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["ok"], false);
  EXPECT_EQ(j["issues"][0]["chunk"], 3);

  r = Ckpt("verify " + root + "/does-not-exist");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("latest_checkpointed_iteration.txt"), std::string::npos) << r.out;
}

// A garbage tracker fails `verify` (and `load`) of the latest: `verify --all`
// must not pass the root (issue 28: it exited 0).
TEST(CliTest, VerifyAllAgreesWithVerifyOnAGarbageTracker) {
  const std::string root = MakeCheckpoint();
  std::ofstream(root + "/" + kTrackerName) << "x\n";
  CmdResult one = Ckpt("verify " + root);
  EXPECT_EQ(one.code, 1) << one.out;
  CmdResult all = Ckpt("verify " + root + " --all");
  EXPECT_EQ(all.code, one.code) << all.out;
  EXPECT_NE(all.out.find("does not hold an iteration number"), std::string::npos) << all.out;
  all = Ckpt("verify " + root + " --all --json");
  EXPECT_EQ(all.code, 1) << all.out;
  const size_t brace = all.out.find('{');
  ASSERT_NE(brace, std::string::npos) << all.out;
  auto j = nlohmann::json::parse(all.out.substr(brace));
  EXPECT_EQ(j["ok"], false);
  EXPECT_TRUE(j["latest"].is_string()) << all.out;
}

// Negative controls, test hooks, fault plans and the harness commands are not
// in the product: `ckpt` neither shows nor parses them (exit 2, unknown
// option or command); ckpt-lab shows each in its --help and parses it.
TEST(CliTest, HarnessSwitchesAreOnlyInCkptLab) {
  struct Case {
    std::string cmd, required, visible;
    std::vector<std::string> harness;
  };
  const std::string root = testing::ScratchDir("cli_harness_switches");
  const std::vector<Case> cases = {
      {"train", "--root " + root, "--async-save",
       {"--inject-nan", "--no-rng-state", "--no-iterator-state", "--kill-after-save", "--async-no-snapshot",
        "--async-delay-ms", "--kill-at", "--stall-at", "--faults", "--faults-log"}},
      {"save", "--root " + root + " --iter 1", "--optimizer", {"--naive-fc1", "--naive-layer-offset", "--faults"}},
      {"load", "--root " + root, "--fallback", {"--naive-fc1", "--naive-layer-offset", "--faults"}},
      {"convert", root + " " + root + "/out --to hf", "--layout", {"--negative-control"}}};
  for (const auto& [cmd, required, visible, flags] : cases) {
    CmdResult product = Ckpt(cmd + " --help"), lab = testing::RunCkptLab(cmd + " --help");
    EXPECT_EQ(product.code, 0) << product.out;
    EXPECT_EQ(lab.code, 0) << lab.out;
    EXPECT_NE(product.out.find(visible), std::string::npos) << cmd << ": " << product.out;
    for (const auto& flag : flags) {
      EXPECT_EQ(product.out.find(flag + " "), std::string::npos) << "ckpt " << cmd << " --help shows " << flag;
      EXPECT_NE(lab.out.find(flag + " "), std::string::npos) << "ckpt-lab " << cmd << " --help lacks " << flag;
      CmdResult parsed = Ckpt(cmd + " " + required + " " + flag);
      EXPECT_EQ(parsed.code, 2) << "ckpt " << cmd << " parses " << flag << ": " << parsed.out;
      EXPECT_NE(parsed.out.find("not expected: " + flag), std::string::npos) << "ckpt " << cmd << ": " << parsed.out;
    }
  }
  for (const std::string& harness_cmd : std::vector<std::string>{"faults run --work " + root, "scenario list"}) {
    const std::string name = harness_cmd.substr(0, harness_cmd.find(' '));
    CmdResult product = Ckpt(harness_cmd);
    EXPECT_EQ(product.code, 2) << "ckpt runs the harness command " << name << ": " << product.out;
    EXPECT_NE(product.out.find("A subcommand is required"), std::string::npos) << name << ": " << product.out;
    EXPECT_EQ(Ckpt("--help").out.find("\n  " + name + " "), std::string::npos) << name;
    EXPECT_NE(testing::RunCkptLab("--help").out.find("\n  " + name + " "), std::string::npos) << name;
  }
}

// `ckpt train --async-save` allocates the snapshot arena at job start, so no
// save (the first included) maps memory while the training loop waits.
TEST(CliTest, AsyncTrainReservesTheArenaBeforeTheFirstSave) {
  const std::string root = testing::ScratchDir("cli_async_train");
  CmdResult r = Ckpt("train --layout tp=1 --root " + root + " --model tiny --steps 2 --save-every 1 --async-save --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.rfind("\n{") + 1));
  ASSERT_EQ(j["saves"].size(), 2u) << r.out;
  EXPECT_GT(j["async"]["arena_bytes"].get<int64_t>(), 0) << r.out;
  for (const auto& save : j["saves"]) EXPECT_EQ(save["allocate_seconds"].get<double>(), 0.0) << save.dump();
}

// `ckpt load --direct-io --threads N`: every element checked, every stored
// byte read with O_DIRECT (the JSON says how many), a worker count of 0 refused.
TEST(CliTest, DirectIoLoadChecksEveryElementAndReportsDirectBytes) {
  const std::string root = testing::ScratchDir("cli_direct_load");
  CmdResult r = Ckpt("save --root " + root + " --iter 1 --model tiny --layout tp=1 --direct-io --json");
  ASSERT_EQ(r.code, 0) << r.out;
  r = Ckpt("load --root " + root + " --layout tp=1 --direct-io --threads 3 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = nlohmann::json::parse(r.out.substr(r.out.rfind("\n{") + 1));
  EXPECT_EQ(j["mismatches"], 0) << r.out;
  EXPECT_GT(j["elements_checked"].get<int64_t>(), 0) << r.out;
  ASSERT_TRUE(j.contains("direct_io")) << r.out;
  EXPECT_EQ(j["direct_io"]["fallback"], "") << r.out;
  EXPECT_GE(j["direct_io"]["direct_bytes"].get<int64_t>(), j["bytes"].get<int64_t>()) << r.out;
  r = Ckpt("load --root " + root + " --layout tp=1 --threads 0");
  EXPECT_EQ(r.code, 2) << r.out;
}

// Saves are direct and loads auto by default (CKPT_DIRECT_IO unset);
// --buffered-io turns either off, and it excludes --direct-io.
TEST(CliTest, DirectIoDefaultsAndBufferedIoSwitch) {
  const std::string root = testing::ScratchDir("cli_io_modes");
  auto last_json = [](const CmdResult& r) { return nlohmann::json::parse(r.out.substr(r.out.rfind("\n{") + 1)); };
  CmdResult r = Ckpt("save --root " + root + " --iter 1 --model tiny --layout tp=1 --buffered-io --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(last_json(r)["direct_io"]["mode"], "off") << r.out;
  r = Ckpt("load --root " + root + " --layout tp=1 --buffered-io --json");
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = last_json(r);
  EXPECT_EQ(j["mismatches"], 0) << r.out;
  EXPECT_EQ(j["direct_io"]["mode"], "off") << r.out;
  EXPECT_EQ(j["direct_io"]["direct_bytes"], 0) << r.out;
  r = Ckpt("load --root " + root + " --layout tp=1 --direct-io --buffered-io");
  EXPECT_EQ(r.code, 2) << r.out;
  r = Ckpt("verify " + root + " --buffered-io --json");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["direct_io"]["mode"], "off") << r.out;
  EXPECT_EQ(j["direct_io"]["direct_bytes"], 0) << r.out;
  r = Ckpt("verify " + root + " --direct-io --json");
  ASSERT_EQ(r.code, 0) << r.out;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["direct_io"]["mode"], "on") << r.out;
  EXPECT_GE(j["direct_io"]["direct_bytes"], j["bytes"]) << r.out;
  EXPECT_EQ(Ckpt("verify " + root + " --direct-io --buffered-io").code, 2);
  if (std::getenv("CKPT_DIRECT_IO")) GTEST_SKIP() << "CKPT_DIRECT_IO is set: the defaults are not in effect";
  r = Ckpt("save --root " + root + " --iter 2 --model tiny --layout tp=1 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  j = last_json(r);
  EXPECT_EQ(j["direct_io"]["mode"], "on") << r.out;
  EXPECT_EQ(j["direct_io"]["ranks_direct"], 1) << r.out;
  r = Ckpt("load --root " + root + " --layout tp=1 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  j = last_json(r);
  EXPECT_EQ(j["mismatches"], 0) << r.out;
  EXPECT_EQ(j["direct_io"]["mode"], "auto") << r.out;
  r = Ckpt("verify " + root + " --json");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(nlohmann::json::parse(r.out)["direct_io"]["mode"], "auto") << r.out;
}

// Bad input exits 2 in every command, and the message names the command.
TEST(CliTest, BadInputExitsTwoNamingTheCommand) {
  for (const std::string args : {"verify /nonexistent/ckpt", "inspect /nonexistent/ckpt", "fingerprint /nonexistent/ckpt",
                                 "diff /nonexistent/a /nonexistent/b", "plan --to tp=2", "plan --simulate tiny --from tp=1 --to tp=x",
                                 "verify", "no-such-command"}) {
    CmdResult r = Ckpt(args);
    EXPECT_EQ(r.code, 2) << args << ": " << r.out;
  }
  CmdResult r = Ckpt("plan --to tp=2");
  EXPECT_NE(r.out.find("ckpt plan"), std::string::npos) << r.out;
}

// A save or load that fails before its job knows the rank names none (it
// used to print "rank -1:").
TEST(CliTest, EarlyLoadAndSaveFailuresNameNoRankMinusOne) {
  for (const std::string args : {"load --root /nonexistent/ckpt", "save --root /nonexistent/ckpt --iter -1"}) {
    CmdResult r = Ckpt(args);
    EXPECT_NE(r.code, 0) << args << ": " << r.out;
    EXPECT_EQ(r.out.find("rank -1"), std::string::npos) << args << ": " << r.out;
    EXPECT_NE(r.out.find("ckpt " + args.substr(0, 4) + ": "), std::string::npos) << args << ": " << r.out;
  }
}

}  // namespace
}  // namespace ckpt
