// Command-line parsing of ckpt-lab (harness/lab): the product's commands with
// the harness switches, and the harness's own commands. Includes CLI11.
#pragma once

#include "cli/flags.h"

namespace ckpt::cli {

// Every ckpt-lab command (lab_flags.cc): RegisterProduct + harness switches,
// faults, scenario.
void RegisterLab(CLI::App& app, Status* outcome);
// `faults child|run|deadline|powerloss|damage` (faults_flags.cc).
void RegisterFaults(CLI::App& app, Status* outcome);

}  // namespace ckpt::cli
