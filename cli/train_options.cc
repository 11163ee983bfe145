// The saving options of `ckpt train` (see cli/train_saver.h): background
// saves, fault plans, retention, and the hidden async developer switches;
// and the training configuration (cli/train_options.h).
#include "cli/train_options.h"

namespace ckpt::cli {

void AddTrainConfigOptions(CLI::App* cmd, workload::TrainConfig* c) {
  cmd->add_option("--seed", c->seed, "seed of initial weights, data and RNG");
  cmd->add_option("--global-batch", c->global_batch, "samples per iteration");
  cmd->add_option("--micro-batch", c->micro_batch, "samples per micro batch per DP rank");
  cmd->add_option("--lr", c->lr.max_lr, "peak learning rate");
  cmd->add_option("--min-lr", c->lr.min_lr, "final learning rate");
  cmd->add_option("--lr-warmup", c->lr.warmup_steps, "warmup iterations");
  cmd->add_option("--lr-decay", c->lr.decay_steps, "iteration where the decay reaches min-lr");
  cmd->add_option("--lr-style", c->lr.style, "constant, linear or cosine");
}

void AddTrainSaveOptions(CLI::App* cmd, TrainSaveFlags* f) {
  cmd->add_flag("--async-save", f->async,
                "save in the background (AsyncSaver on its own communicator; needs MPI_THREAD_MULTIPLE): "
                "training blocks only for the snapshot copy");
  cmd->add_option("--snapshot-memory", f->snapshot_memory,
                  "with --async-save: host (default) or pinned (cudaHostAlloc; the GPU path)");
  cmd->add_option("--faults", f->faults,
                  "fault plan for the saves (faults/fault_spec.h; one FaultEnv for the job: nth counts over saves)");
  cmd->add_option("--faults-log", f->faults_log, "append one JSON line per fired fault to this file");
  cmd->add_option("--hash", f->hash, "chunk hash of the saves: sha256 (default) or xxh3-128 (ckpt save --hash)");
  cmd->add_option("--save-retain-interval", f->retention.keep_every,
                  "retention: after each committed save delete older iterations except multiples of K "
                  "(Megatron-LM's flag) and the --keep-last newest; the newest is never deleted");
  cmd->add_option("--keep-last", f->retention.keep_last,
                  "retention: keep the newest N committed iterations (with or without --save-retain-interval)");
  const std::string kDev = "DEVELOPER ONLY (hidden): ";
  cmd->add_flag("--async-no-snapshot", f->no_snapshot,
                kDev + "NEGATIVE CONTROL (never for real saves): the background save reads the live buffers")
      ->group("");
  cmd->add_option("--async-delay-ms", f->delay_ms,
                  kDev + "TEST HOOK: the background save sleeps this long before it reads or writes anything")
      ->group("");
}

}  // namespace ckpt::cli
