// Command-line parsing of `ckpt`: each Register* adds one CLI11 subcommand
// whose options fill a flags struct (cli/commands.h, cli/job_flags.h,
// cli/job_commands.h) and whose callback stores the Status the command's Run*
// returns in *outcome (main maps it to the exit code, ExitCodeOf). Only
// cli/flags_*.cc and main.cc include CLI11.
#pragma once

#include <CLI/CLI.hpp>

#include "ckpt/base/status.h"

namespace ckpt::cli {

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
void RegisterSave(CLI::App& app, Status* outcome);
void RegisterLoad(CLI::App& app, Status* outcome);
void RegisterReshard(CLI::App& app, Status* outcome);
void RegisterPlan(CLI::App& app, Status* outcome);
void RegisterFingerprint(CLI::App& app, Status* outcome);
void RegisterDiff(CLI::App& app, Status* outcome);
void RegisterConvert(CLI::App& app, Status* outcome);
// cli/flags_jobs.cc
void RegisterFaults(CLI::App& app, Status* outcome);
void RegisterTrain(CLI::App& app, Status* outcome);

}  // namespace ckpt::cli
