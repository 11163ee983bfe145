// Option groups of `ckpt train` (cli/cmd_train.cc), kept here so the command
// file stays small: the training configuration and the saving options.
#pragma once

#include <CLI/CLI.hpp>

#include "ckpt/workload/train_config.h"
#include "cli/train_saver.h"

namespace ckpt::cli {

// --seed, --global-batch, --micro-batch, --lr, --min-lr, --lr-warmup,
// --lr-decay, --lr-style.
void AddTrainConfigOptions(CLI::App* cmd, workload::TrainConfig* c);

// --async-save, --snapshot-memory, --faults, --faults-log, --hash,
// --save-retain-interval, --keep-last, and the hidden async developer
// switches (--async-no-snapshot, --async-delay-ms).
void AddTrainSaveOptions(CLI::App* cmd, TrainSaveFlags* f);

}  // namespace ckpt::cli
