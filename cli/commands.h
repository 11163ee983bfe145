// The `ckpt` subcommands. Each Register* adds one CLI11 subcommand whose
// callback sets the process exit code; the work is done by the libraries.
#pragma once

#include <CLI/CLI.hpp>

namespace ckpt::cli {

// Exit codes: 0 success, 1 the check failed (verify found problems, mismatches),
// 2 usage or operational error (bad input, IO error, missing checkpoint).
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitError = 2;

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

}  // namespace ckpt::cli
