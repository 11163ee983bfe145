// Entry point of `ckpt train` (see cli/commands.h for how commands and their
// parsing are split): the options as a plain struct; RunTrain returns the
// command's Status (main maps it to the exit code). The fault commands are
// the harness's: harness/lab/lab_commands.h.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/mpi/launcher_term.h"  // TermDeferred
#include "ckpt/workload/train_config.h"
#include "cli/train_saver.h"

namespace ckpt::cli {

// ckpt train (cmd_train.cc).
struct TrainFlags {
  std::string layout = "tp=1", model = "tiny", root, mode = "elementwise", save_at, nonfinite = "refuse";
  std::string compression = "none";
  int64_t steps = 10, save_every = 0, inject_nan = -1, timeout_ms = 60000, log_interval = 0;
  workload::TrainConfig cfg;
  TrainSaveFlags save;
  bool resume = false, no_rng = false, no_iterator = false, kill_after_save = false, json = false,
       allow_older = false, exit_signal = false;
};
Status RunTrain(TrainFlags& f);

}  // namespace ckpt::cli
