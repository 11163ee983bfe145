// Command-line parsing of `ckpt`: each Register* adds one CLI11 subcommand
// whose options fill a flags struct (cli/commands.h, cli/job_flags.h,
// cli/job_commands.h) and whose callback stores the Status the command's Run*
// returns in *outcome (main maps it to the exit code, ExitCodeOf). Only
// cli/flags_*.cc, main.cc and ckpt-lab's harness/lab/*_flags.cc include CLI11.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "ckpt/base/status.h"

namespace ckpt::cli {

struct JobFlags;      // cli/job_flags.h
struct TrainFlags;    // cli/job_commands.h
struct ConvertFlags;  // cli/commands.h

// A program over these commands: `ckpt` (cli/ckpt_main.cc: the product
// commands) or `ckpt-lab` (harness/lab/lab_main.cc: the same plus the
// harness's). CliMain parses, runs the one command, maps its Status to the
// exit code once (ExitCodeOf) and turns anything a command lets escape into
// exit 2 with a message naming the command (main.cc).
struct Program {
  std::string name;   // "ckpt" or "ckpt-lab": --version and error messages
  std::string about;  // the first line of --help
  std::function<void(CLI::App& app, Status* outcome)> register_commands;
};
int CliMain(int argc, char** argv, const Program& program);

// The product's commands (main.cc): every command of `ckpt`. Returns the
// flags of the commands ckpt-lab adds harness switches to.
struct ProductFlags {
  std::shared_ptr<JobFlags> save, load;
  std::shared_ptr<TrainFlags> train;
  std::shared_ptr<ConvertFlags> convert;
};
ProductFlags RegisterProduct(CLI::App& app, Status* outcome);

// The --timeout-ms option of every command: a whole number of milliseconds
// checked by CheckTimeoutMillis (ckpt/base/timeout.h, the check the Python API
// uses too); a refusal names the value, the accepted range and why.
CLI::Option* AddTimeoutMs(CLI::App* cmd, int64_t* timeout_ms, const std::string& what);
// The target of reshard and plan: --to (a GPT layout, GPT checkpoints) or, for any checkpoint,
// --ranks/--shard per-key rules or --to-unsharded (ckpt/protocol/rule_reshard.h).
struct RuleTargetFlags;  // cli/commands.h
void AddTargetFlags(CLI::App* cmd, std::string* gpt_to, RuleTargetFlags* rules);
// --json (help text `what`) and --no-progress (cli/progress.h: one updating line when stderr
// is a terminal, JSON lines on stderr with --json, nothing when piped or with --no-progress).
void AddJsonFlags(CLI::App* cmd, bool* json, bool* no_progress, const std::string& what);

// cli/flags_data.cc
void RegisterInspect(CLI::App& app, Status* outcome);
void RegisterVerify(CLI::App& app, Status* outcome);
std::shared_ptr<JobFlags> RegisterSave(CLI::App& app, Status* outcome);
std::shared_ptr<JobFlags> RegisterLoad(CLI::App& app, Status* outcome);
void RegisterReshard(CLI::App& app, Status* outcome);
void RegisterPlan(CLI::App& app, Status* outcome);
void RegisterFingerprint(CLI::App& app, Status* outcome);
void RegisterDiff(CLI::App& app, Status* outcome);
std::shared_ptr<ConvertFlags> RegisterConvert(CLI::App& app, Status* outcome);
// cli/flags_jobs.cc
std::shared_ptr<TrainFlags> RegisterTrain(CLI::App& app, Status* outcome);

}  // namespace ckpt::cli
