// Options of `ckpt-lab faults ...` (harness/lab/lab_flags.h). Each callback
// runs the command's Run* (harness/lab/lab_commands.h).
#include <memory>
#include <string>

#include "cli/flags.h"
#include "harness/lab/lab_commands.h"
#include "harness/lab/lab_flags.h"

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
  cmd->add_option("--variants", f->variants,
                  "comma list (default powercut,eio,enospc-persist,short,damage; also "
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
  cmd->add_flag("--no-hash-check", f->no_hash_check,
                "negative control: recovery loads skip chunk hashes, so "
                "only the element check stands between damage and 'new'");
  cmd->add_flag("--in-place-commit", f->in_place_commit,
                "negative control: every save writes iter_N/ in place (no tmp dir, no rename), manifest.json "
                "last and the tracker by a plain truncating write, none fsynced: Megatron-LM's torch_dist commit");
  cmd->add_option("--expect", f->expect,
                  "negative control: exit 0 only if each listed outcome (e.g. lost,torn) occurred");
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
  cmd->add_option("--kind", f->kind, "bitflip, truncate or delete")
      ->check(CLI::IsMember({"bitflip", "truncate", "delete"}));
  cmd->add_option("--chunk", f->req.chunk, "first, mid or last chunk of the file")
      ->check(CLI::IsMember({"first", "mid", "last"}));
  cmd->add_option("--seed", f->seed, "picks the byte and bit");
  cmd->callback([=]() { *outcome = RunDamage(*f); });
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

}  // namespace ckpt::cli
