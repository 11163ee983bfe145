// The `ckpt` subcommands. Each Register* adds one CLI11 subcommand whose
// callback sets the process exit code; the work is done by the libraries.
#pragma once

#include <CLI/CLI.hpp>

#include "ckpt/base/status.h"

namespace ckpt::cli {

// Exit codes, the same for the same cause in every command (README "Exit
// codes"): 0 success; 1 the check failed - damaged data (kCorruption: a
// flipped bit, a torn file), verify problems, mismatching values, diff found
// differences, a save refused for NaN/Inf; 2 usage or operational error (bad
// input, IO error, missing checkpoint, timeout, an uncaught exception).
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitError = 2;

// The exit code of a failed command's Status (typed fields, never its text).
int ExitCodeOf(const Status& st);

void RegisterInspect(CLI::App& app, int* exit_code);
void RegisterVerify(CLI::App& app, int* exit_code);
void RegisterSave(CLI::App& app, int* exit_code);
void RegisterLoad(CLI::App& app, int* exit_code);
void RegisterFaults(CLI::App& app, int* exit_code);
void RegisterReshard(CLI::App& app, int* exit_code);
void RegisterPlan(CLI::App& app, int* exit_code);
void RegisterTrain(CLI::App& app, int* exit_code);
void RegisterFingerprint(CLI::App& app, int* exit_code);
void RegisterDiff(CLI::App& app, int* exit_code);
void RegisterScenario(CLI::App& app, int* exit_code);
void RegisterGpu(CLI::App& app, int* exit_code);
void RegisterConvert(CLI::App& app, int* exit_code);
// Parts of `ckpt faults` (cmd_faults_child.cc, cmd_faults_disk.cc).
void RegisterFaultChild(CLI::App* faults, int* exit_code);
void RegisterFaultDiskTools(CLI::App* faults, int* exit_code);

}  // namespace ckpt::cli
