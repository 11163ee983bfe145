// Options of `ckpt faults ...` and `ckpt train` (see cli/flags.h). Each
// callback runs the command's Run* (cli/job_commands.h).
#include <memory>
#include <string>

#include "cli/flags.h"
#include "cli/job_commands.h"

namespace ckpt::cli {
namespace {

void AddJobFlags(CLI::App* cmd, FaultRunFlags* f) {
  cmd->add_option("--work", f->work, "scratch directory (wiped first)")->required();
  cmd->add_option("--layout", f->layout, "the faulted job's layout");
  cmd->add_option("--model", f->model, "GPT preset[:k=v,...]");
  AddTimeoutMs(cmd, &f->timeout_ms, "deadline of every collective in the jobs");
  cmd->add_option("--mpirun", f->mpirun, "mpirun prefix before -np (default $CKPT_MPIRUN, $MPIRUN or a local one)");
  cmd->add_option("--mpi-extra", f->mpi_extra, "extra mpirun flags (default: faster MCA choices)");
  cmd->add_flag("--quiet", f->quiet, "no progress lines on stderr");
  cmd->add_option("--child-ckpt", f->child_ckpt,
                  "the ckpt executable the jobs run (default: this one; e.g. an older build, to compare)");
}

void RegisterFaultChild(CLI::App* faults, Status* outcome) {
  auto* cmd = faults->add_subcommand("child", "One rank of a faulted save or load job (run under mpirun)");
  auto f = std::make_shared<FaultChildFlags>();
  cmd->add_option("--phase", f->phase, "save or load")->required()->check(CLI::IsMember({"save", "load"}));
  cmd->add_option("--root", f->root, "checkpoint root")->required();
  cmd->add_option("--layout", f->layout, "this job's layout");
  cmd->add_option("--model", f->model, "GPT preset[:k=v,...]");
  cmd->add_option("--iter", f->iteration, "save: the iteration; load: -1 = the latest (LatestIteration)");
  cmd->add_option("--spec", f->spec, "fault plan text (faults/fault_spec.h)");
  cmd->add_option("--spec-file", f->spec_file, "fault plan file");
  cmd->add_option("--trace-dir", f->trace_dir, "save: write each rank's IO trace here");
  cmd->add_option("--power-dir", f->power_dir, "save: journal for power-loss simulation (cut marker there)");
  cmd->add_option("--result-dir", f->result_dir, "per-rank outcome, fired faults, commit acks");
  AddTimeoutMs(cmd, &f->timeout_ms, "deadline of every collective");
  cmd->add_option("--chunk-kb", f->chunk_kb, "save: target chunk size in KiB");
  cmd->add_option("--cases", f->cases, "save: run many fault cases in this job (JSON lines: root, result_dir, spec)");
  cmd->add_flag("--fallback", f->fallback, "load: fall back to the newest checkpoint that verifies");
  cmd->add_flag("--no-hash-check", f->no_hash_check, "load: skip chunk hashes (shows the value check alone)");
  cmd->add_flag("--in-place-commit", f->in_place_commit,
                "save: negative control: write iter_N/ and the tracker in place, as Megatron-LM does");
  cmd->callback([=]() { *outcome = RunFaultChild(*f); });
}

void RegisterRun(CLI::App* faults, Status* outcome) {
  auto* cmd = faults->add_subcommand("run", "Fault campaign: every boundary x rank x variant, recovered and checked");
  auto f = std::make_shared<FaultRunFlags>();
  AddJobFlags(cmd, f.get());
  cmd->add_option("--variants", f->variants, "comma list (default powercut,eio,enospc-persist,short,damage; also "
                                             "crash,sigkill,hang,enospc,eio-persist,delay)");
  cmd->add_option("--power-modes", f->modes, "power-loss judgements of powercut runs: drop,prefix,torn");
  cmd->add_option("--boundaries", f->boundaries, "smart or all")->check(CLI::IsMember({"smart", "all"}));
  cmd->add_option("--points", f->points, "only these points (comma list; 'end' = after the job)");
  cmd->add_option("--ranks", f->ranks, "only these ranks (comma list)");
  cmd->add_option("--recover-layout", f->recover, "layout of the recovery load (world 1: no mpirun)");
  cmd->add_option("--chunk-kb", f->chunk_kb, "chunk size of the saves");
  cmd->add_option("--seed", f->seed, "power-loss choices");
  cmd->add_option("--json", f->json_out, "also write the report as JSON here");
  cmd->add_flag("--no-fsync", f->no_fsync, "negative control: Sync/SyncDir are no-ops in every job");
  cmd->add_flag("--no-hash-check", f->no_hash_check, "negative control: recovery loads skip chunk hashes, so "
                                                     "only the element check stands between damage and 'new'");
  cmd->add_flag("--in-place-commit", f->in_place_commit,
                "negative control: every save writes iter_N/ in place (no tmp dir, no rename), manifest.json "
                "last and the tracker by a plain truncating write, none fsynced: Megatron-LM's torch_dist commit");
  cmd->add_option("--expect", f->expect, "negative control: exit 0 only if each listed outcome (e.g. lost,torn) occurred");
  cmd->add_flag("--keep", f->keep, "keep every run directory");
  cmd->callback([=]() { *outcome = RunCampaignCmd(*f); });
}

void RegisterDeadline(CLI::App* faults, Status* outcome) {
  auto* cmd = faults->add_subcommand(
      "deadline", "Hung, killed and failing ranks: every survivor fails in time naming the rank, nothing committed");
  auto f = std::make_shared<FaultRunFlags>();
  f->timeout_ms = 1000;
  AddJobFlags(cmd, f.get());
  cmd->add_option("--scenarios", f->scenarios,
                  "space-separated <save|load>:<hang|sigkill|eio>@<point>#<nth>:r<rank>=<phase>");
  cmd->callback([=]() { *outcome = RunDeadlineCmd(*f); });
}

void RegisterPowerLoss(CLI::App* faults, Status* outcome) {
  auto* cmd = faults->add_subcommand("powerloss", "Apply a recorded power cut (journals of --power-dir) to the disk");
  auto f = std::make_shared<PowerLossFlags>();
  cmd->add_option("--dir", f->dir, "the jobs' --power-dir")->required();
  cmd->add_option("--mode", f->mode, "drop, prefix or torn");
  cmd->add_option("--seed", f->seed, "random choices of prefix/torn");
  cmd->callback([=]() { *outcome = RunPowerLoss(*f); });
}

void RegisterDamage(CLI::App* faults, Status* outcome) {
  auto* cmd = faults->add_subcommand("damage", "Damage a committed checkpoint: bit flip, truncate or delete a file");
  auto f = std::make_shared<DamageFlags>();
  cmd->add_option("--root", f->root, "checkpoint root")->required();
  cmd->add_option("--iter", f->iteration, "iteration (default: the tracker's)");
  cmd->add_option("--file", f->req.file, "shard file name in the iteration dir, or 'manifest'")->required();
  cmd->add_option("--kind", f->kind, "bitflip, truncate or delete")->check(CLI::IsMember({"bitflip", "truncate", "delete"}));
  cmd->add_option("--chunk", f->req.chunk, "first, mid or last chunk of the file")->check(CLI::IsMember({"first", "mid", "last"}));
  cmd->add_option("--seed", f->seed, "picks the byte and bit");
  cmd->callback([=]() { *outcome = RunDamage(*f); });
}

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

// Saving: --async-save, --snapshot-memory, --faults, --faults-log, --hash,
// retention, and the hidden async developer switches.
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
  cmd->add_option("--local-dir", f->local_dir, "local tier: node-local directory ('{node}': the node index), "
                  "saved every --local-every, replicated to --replicas nodes; global saves drain from it");
  cmd->add_option("--local-every", f->local_every, "local tier: save every K iterations");
  cmd->add_option("--replicas", f->replicas, "local tier: copies of each rank's files on other nodes (default 1)");
  cmd->add_option("--ranks-per-node", f->ranks_per_node,
                  "local tier: ranks per node, block placement (default: the launcher's ranks on this node)");
  const std::string kDev = "DEVELOPER ONLY (hidden): ";
  cmd->add_option("--kill-at", f->kill_at, kDev + "SIGKILL every rank after the saves of this iteration")->group("");
  cmd->add_option("--stall-at", f->stall_at, kDev + "every rank waits (300 s at most) after this iteration's saves")
      ->group("");
  cmd->add_flag("--async-no-snapshot", f->no_snapshot,
                kDev + "NEGATIVE CONTROL (never for real saves): the background save reads the live buffers")
      ->group("");
  cmd->add_option("--async-delay-ms", f->delay_ms,
                  kDev + "TEST HOOK: the background save sleeps this long before it reads or writes anything")
      ->group("");
}

// DEVELOPER ONLY: negative controls, test hooks and faults for the
// reproducibility tests and scenarios. Hidden from --help (group ""); the
// async switches reach the saver through tests/testing (AsyncSaveControls).
void AddDeveloperSwitches(CLI::App* cmd, TrainFlags* f) {
  const std::string kDev = "DEVELOPER ONLY (hidden): ";
  cmd->add_flag("--no-rng-state", f->no_rng, kDev + "negative control: neither save nor load the RNG state")->group("");
  cmd->add_flag("--no-iterator-state", f->no_iterator, kDev + "negative control: neither save nor load the iterator")
      ->group("");
  cmd->add_flag("--kill-after-save", f->kill_after_save, kDev + "SIGKILL every rank after the first save commits")
      ->group("");
  cmd->add_option("--inject-nan", f->inject_nan,
                  kDev + "fault: a NaN gradient at this iteration (decoder.layers.0.mlp.linear_fc2.weight, element 100)")
      ->group("");
}

}  // namespace

void RegisterFaults(CLI::App& app, Status* outcome) {
  auto* faults = app.add_subcommand("faults", "Fault injection: campaigns, hung ranks, power loss, damage");
  faults->require_subcommand(1);
  RegisterFaultChild(faults, outcome);
  RegisterRun(faults, outcome);
  RegisterDeadline(faults, outcome);
  RegisterPowerLoss(faults, outcome);
  RegisterDamage(faults, outcome);
}

void RegisterTrain(CLI::App& app, Status* outcome) {
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
  AddDeveloperSwitches(cmd, f.get());
  cmd->callback([=]() { *outcome = RunTrain(*f); });
}

}  // namespace ckpt::cli
