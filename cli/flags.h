// Command-line parsing of `ckpt`: each Register* adds one CLI11 subcommand
// whose options fill a flags struct (cli/commands.h, cli/job_flags.h,
// cli/job_commands.h) and whose callback sets the process exit code to what
// the command's Run* returns. Only cli/flags_*.cc and main.cc include CLI11.
#pragma once

#include <CLI/CLI.hpp>

namespace ckpt::cli {

// The --timeout-ms option of every command: a whole number of milliseconds
// checked by CheckTimeoutMillis (ckpt/base/timeout.h, the check the Python API
// uses too); a refusal names the value, the accepted range and why.
CLI::Option* AddTimeoutMs(CLI::App* cmd, int64_t* timeout_ms, const std::string& what);

// cli/flags_data.cc
void RegisterInspect(CLI::App& app, int* exit_code);
void RegisterVerify(CLI::App& app, int* exit_code);
void RegisterSave(CLI::App& app, int* exit_code);
void RegisterLoad(CLI::App& app, int* exit_code);
void RegisterReshard(CLI::App& app, int* exit_code);
void RegisterPlan(CLI::App& app, int* exit_code);
void RegisterFingerprint(CLI::App& app, int* exit_code);
void RegisterDiff(CLI::App& app, int* exit_code);
void RegisterScenario(CLI::App& app, int* exit_code);
void RegisterGpu(CLI::App& app, int* exit_code);
void RegisterConvert(CLI::App& app, int* exit_code);
// cli/flags_jobs.cc
void RegisterFaults(CLI::App& app, int* exit_code);
void RegisterTrain(CLI::App& app, int* exit_code);

}  // namespace ckpt::cli
