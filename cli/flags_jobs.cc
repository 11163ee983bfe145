// Options of `ckpt train` (see cli/flags.h); its callback runs RunTrain
// (cli/job_commands.h). ckpt-lab's switches: harness/lab/lab_flags.cc.
#include <memory>
#include <string>

#include "cli/flags.h"
#include "cli/job_commands.h"

namespace ckpt::cli {
namespace {

// --seed, --global-batch, --micro-batch and the learning-rate schedule.
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

// Saving: --async-save, --snapshot-memory, --hash, retention, the local tier
// (ckpt-lab adds --faults, --faults-log and its async switches: harness/lab/lab_flags.cc).
void AddTrainSaveOptions(CLI::App* cmd, TrainSaveFlags* f) {
  cmd->add_flag("--async-save", f->async,
                "save in the background (AsyncSaver on its own communicator; needs MPI_THREAD_MULTIPLE): "
                "training blocks only for the snapshot copy");
  cmd->add_option("--snapshot-memory", f->snapshot_memory,
                  "with --async-save: host (default) or pinned (cudaHostAlloc; the GPU path)");
  cmd->add_option("--hash", f->hash, "chunk hash of the saves: sha256 (default) or xxh3-128 (ckpt save --hash)");
  cmd->add_option("--save-retain-interval", f->retention.keep_every,
                  "retention: after each committed save delete older iterations except multiples of K "
                  "(Megatron-LM's flag) and the --keep-last newest; the newest is never deleted");
  cmd->add_option("--keep-last", f->retention.keep_last,
                  "retention: keep the newest N committed iterations (with or without --save-retain-interval)");
  cmd->add_option("--local-dir", f->local_dir, "local tier: node-local directory ('{node}': the node index), "
                  "saved every --local-every, replicated to --replicas nodes; global saves drain from it");
  cmd->add_option("--local-every", f->local_every, "local tier: save every K iterations");
  cmd->add_option("--replicas", f->replicas, "local tier: copies of each rank's files on other nodes (default 1)");
  cmd->add_option("--ranks-per-node", f->ranks_per_node,
                  "local tier: ranks per node, block placement (default: the launcher's ranks on this node)");
}

}  // namespace

std::shared_ptr<TrainFlags> RegisterTrain(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand("train", "Deterministic GPT training workload with checkpoint/resume (run under mpirun)");
  auto f = std::make_shared<TrainFlags>();
  cmd->add_option("--root", f->root, "checkpoint root directory")->required();
  cmd->add_option("--layout", f->layout, "this job's layout, e.g. tp=4,pp=2,dp=1");
  cmd->add_option("--model", f->model, "GPT preset (tiny, demo), optionally with overrides: tiny:hidden=256,num_layers=4");
  cmd->add_option("--steps", f->steps, "train until this iteration (total, as Megatron's --train-iters)");
  cmd->add_option("--mode", f->mode, "elementwise (layout-invariant) or tp-reduce (TP all-reduce matmul)");
  AddTrainConfigOptions(cmd, &f->cfg);
  cmd->add_option("--save-every", f->save_every, "save every K iterations (and always at --steps)");
  cmd->add_option("--save-at", f->save_at, "save at these iterations, comma-separated (and always at --steps)");
  cmd->add_flag("--resume", f->resume, "resume from the latest checkpoint under --root (strict)");
  cmd->add_flag("--allow-older", f->allow_older,
                "start a new run in a root holding newer iterations (refused by default: 'latest' would pick them)");
  cmd->add_option("--nonfinite", f->nonfinite, "NaN/Inf at save: refuse (default), warn or allow");
  cmd->add_option("--compress", f->compression, "none or zstd");
  AddTimeoutMs(cmd, &f->timeout_ms, "deadline of every checkpoint collective");
  AddTrainSaveOptions(cmd, &f->save);
  cmd->add_flag("--exit-signal-handler", f->exit_signal,
                "on SIGTERM (to any rank) save the current iteration, then exit 0 (Megatron-LM's flag)");
  cmd->add_option("--log-interval", f->log_interval, "print 'train: iteration N' every K iterations");
  AddJsonFlags(cmd, &f->json, &f->save.no_progress, "print the summary as JSON");
  cmd->callback([=]() { *outcome = RunTrain(*f); });
  return f;
}

}  // namespace ckpt::cli
