// Options of inspect, verify, save, load, reshard, plan, fingerprint, diff and convert (cli/flags.h;
// scenario and gpu: main.cc). Each callback runs the command's Run* (cli/commands.h, cli/job_flags.h).
#include <memory>

#include "ckpt/mpi/launcher_term.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/job_flags.h"

namespace ckpt::cli {
namespace {

constexpr const char* kIterLatest =
    "iteration (default: the latest: the newest committed one at or above the tracker's)";

// --root, --layout, --timeout-ms, --json, --no-progress and --bucket-elems of save and
// load (ckpt-lab adds --naive-fc1, --naive-layer-offset and --faults: harness/lab/lab_flags.cc).
void AddCommon(CLI::App* cmd, JobFlags* f) {
  cmd->add_option("--root", f->root, "checkpoint root directory")->required();
  cmd->add_option("--layout", f->layout, "this job's layout, e.g. tp=4,pp=2,dp=1 (world = tp*cp*dp*pp)");
  AddTimeoutMs(cmd, &f->timeout_ms, "deadline of every collective: how long a silent rank is waited for");
  AddJsonFlags(cmd, &f->json, &f->no_progress, "print the summary as JSON");
  cmd->add_option("--bucket-elems", f->bucket_elems,
                  "DDP bucket size in elements for the optimizer layout (0: one bucket per buffer)");
}

// --direct-io / --buffered-io of the commands that read chunks (load, verify;
// ReadModeOf in cli/commands.h turns them into a DirectRead).
void AddReadIoFlags(CLI::App* cmd, bool* direct_io, bool* buffered_io) {
  auto* direct = cmd->add_flag("--direct-io", *direct_io,
                               "read every shard file with O_DIRECT, bypassing the page cache (CKPT_DIRECT_IO=1); "
                               "faster from disk, slower for files still in the page cache");
  cmd->add_flag("--buffered-io", *buffered_io, "read every shard file through the page cache (CKPT_DIRECT_IO=0); "
                "default: per file, direct unless at least half of it is in the page cache")
      ->excludes(direct);
}

}  // namespace

void RegisterInspect(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand("inspect", "Show the tensors, shapes, dtypes, sizes and layout of a checkpoint");
  auto f = std::make_shared<InspectFlags>();
  cmd->add_option("root", f->root, "checkpoint root directory")->required();
  cmd->add_option("--iter", f->iteration, kIterLatest);
  cmd->add_flag("--json", f->json, "machine-readable output");
  cmd->callback([=]() { *outcome = RunInspect(*f); });
}

void RegisterVerify(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand("verify", "Re-read and re-hash every chunk of a checkpoint (exit 0 ok, 1 bad)");
  auto f = std::make_shared<VerifyFlags>();
  cmd->add_option("root", f->root, "checkpoint root directory")->required();
  cmd->add_option("--iter", f->opts.iteration,
                  "iteration (default: the latest: the newest committed one at or above the tracker's; newer "
                  "iterations that do not read are reported as problems)");
  cmd->add_flag("--all", f->all_iterations, "verify every iteration under the root (exit 1 if any is bad)");
  cmd->add_flag("--all-problems", f->all_problems, "report every problem, not only the first");
  AddJsonFlags(cmd, &f->json, &f->no_progress, "machine-readable output");
  AddReadIoFlags(cmd, &f->direct_io, &f->buffered_io);
  cmd->callback([=]() { *outcome = RunVerify(*f); });
}

std::shared_ptr<JobFlags> RegisterSave(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand("save", "Save a GPT model state from a multi-rank job (run under mpirun)");
  auto f = std::make_shared<JobFlags>();
  AddCommon(cmd, f.get());
  cmd->add_option("--iter", f->iteration, "iteration number")->required();
  cmd->add_option("--model", f->model, "GPT preset (tiny, demo) with optional overrides (tiny:tied_embeddings=true,first_stage_layers=3) or a config JSON");
  cmd->add_option("--compress", f->compression, "none or zstd");
  cmd->add_option("--chunk-kb", f->chunk_kb, "target chunk size in KiB");
  cmd->add_option("--hash", f->hash, "chunk integrity hash, recorded in the manifest: sha256 (default; tamper-evident) "
                                     "or xxh3-128 (~10x faster; detects damage, not forgery)");
  cmd->add_option("--encode-threads", f->encode_threads,
                  "pad/compress/hash workers per rank (0: serial; default: cores per local rank)");
  cmd->add_flag("--no-balance", f->no_balance, "write replicas on their main holder only");
  auto* direct = cmd->add_flag("--direct-io", f->direct_io,
                               "write shard files with O_DIRECT, chunks of >= 64 KiB aligned to 4 KiB (the default "
                               "unless CKPT_DIRECT_IO=0; buffered where the filesystem refuses O_DIRECT)");
  cmd->add_flag("--buffered-io", f->buffered_io,
                "write shard files through the page cache, chunks packed (the default with CKPT_DIRECT_IO=0)")
      ->excludes(direct);
  cmd->add_flag("--allow-older", f->allow_older,
                "save below the newest iteration under the root (refused by default: 'latest' would still pick it)");
  f->optimizer = "none";
  cmd->add_option("--optimizer", f->optimizer,
                  "distributed-optimizer state to save: none, model (model space: reshardable across "
                  "DP/TP/PP/EP/bucket size) or bucket (raw bucket slices: same layout only)");
  cmd->callback([=]() { *outcome = TermDeferred(RunSave, *f); });
  return f;
}

std::shared_ptr<JobFlags> RegisterLoad(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand("load", "Load a checkpoint into this job's layout and check every element");
  auto f = std::make_shared<JobFlags>();
  AddCommon(cmd, f.get());
  cmd->add_option("--iter", f->iteration, kIterLatest);
  cmd->add_option("--model", f->model, "GPT preset[:k=v,...] or config JSON; ':k=v,...' adjusts the checkpoint's config (default: as saved)");
  cmd->add_flag("--fallback", f->fallback, "if the latest checkpoint is damaged, load the newest one that verifies");
  cmd->add_flag("--no-check", f->no_check, "skip the element check");
  AddReadIoFlags(cmd, &f->direct_io, &f->buffered_io);
  cmd->add_option("--threads", f->load_threads,
                  "read/verify/decode workers per rank (default: the cores divided by the ranks on this node)")->check(CLI::PositiveNumber);
  cmd->add_option("--strict", f->strict,
                  "fail on key mismatches: all (default: checkpoint keys the job does not request, or "
                  "requested keys it lacks), unexpected, missing (missing ones are skipped otherwise) or none; "
                  "mismatches are printed either way");
  cmd->add_option("--share-reads", f->share_reads,
                  "ranks needing the same chunk read it once and send it: dp (default: ranks with the same "
                  "TP/PP coordinates), job (all ranks) or none");
  cmd->add_option("--share-round-mb", f->share_round_mb, "read sharing: MB a rank sends per exchange round");
  cmd->add_option("--share-transport", f->share_transport,
                  "read sharing: mpi (default) or nccl (the GPU path: chunk bytes over NCCL, one GPU per rank)");
  f->optimizer = "auto";
  cmd->add_option("--optimizer", f->optimizer, "optimizer state to load: auto (as saved), none, model or bucket");
  cmd->callback([=]() { *outcome = TermDeferred(RunLoad, *f); });
  return f;
}

void RegisterReshard(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand("reshard", "Rewrite a checkpoint under another layout (offline, committed atomically)");
  auto f = std::make_shared<ReshardFlags>();
  cmd->add_option("src", f->req.src, "source checkpoint root")->required();
  cmd->add_option("dst", f->req.dst, "destination checkpoint root")->required();
  AddTargetFlags(cmd, &f->req.to, &f->rules);
  cmd->add_option("--iter", f->req.iteration, kIterLatest);
  cmd->add_option("--compress", f->req.compression, "none or zstd");
  cmd->add_option("--chunk-kb", f->chunk_kb, "target chunk size in KiB");
  cmd->add_option("--drop-object", f->req.drop_objects,
                  "leave out this per-rank object key (e.g. a (pp, tp)-grid RNG state under another TP); repeatable");
  AddJsonFlags(cmd, &f->json, &f->no_progress, "machine-readable output");
  cmd->callback([=]() { *outcome = TermDeferred(RunReshard, *f); });
}

void RegisterPlan(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand("plan", "Print the read plan of loading a checkpoint under another layout (no data read)");
  auto f = std::make_shared<PlanFlags>();
  cmd->add_option("root", f->req.root, "checkpoint root (or use --simulate)");
  AddTargetFlags(cmd, &f->req.to, &f->rules);
  cmd->add_option("--iter", f->req.iteration, kIterLatest);
  cmd->add_option("--simulate", f->req.simulate,
                  "plan a checkpoint of this GPT preset that was never written (e.g. llama70b)");
  cmd->add_option("--from", f->req.from, "with --simulate: the layout it was saved with");
  cmd->add_option("--chunk-kb", f->chunk_kb, "with --simulate: chunk size of the simulated files");
  cmd->add_flag("--per-rank", f->req.per_rank, "one line (or JSON entry) per target rank");
  cmd->add_flag("--json", f->json, "machine-readable output");
  cmd->callback([=]() { *outcome = RunPlan(*f); });
}

void RegisterFingerprint(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand("fingerprint", "Layout-invariant digest of a checkpoint's global state");
  auto f = std::make_shared<FingerprintFlags>();
  cmd->add_option("root", f->root, "checkpoint root directory")->required();
  cmd->add_option("--iter", f->opts.iteration, kIterLatest);
  cmd->add_flag("--per-tensor", f->per_tensor, "list every tensor's and object's digest");
  AddJsonFlags(cmd, &f->json, &f->no_progress, "machine-readable output");
  cmd->add_flag("--no-verify", f->no_verify, "skip the chunk hash checks");
  cmd->add_option("--block-kb", f->block_kb, "rows read per block, in KiB");
  cmd->callback([=]() { *outcome = RunFingerprint(*f); });
}

void RegisterDiff(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand("diff", "Which tensors of two checkpoints differ, and by how many ulps (exit 0 same, 1 differ)");
  auto f = std::make_shared<DiffFlags>();
  cmd->add_option("a", f->a, "first checkpoint root")->required();
  cmd->add_option("b", f->b, "second checkpoint root")->required();
  cmd->add_option("--iter-a", f->opts_a.iteration, "iteration of a (default: its tracker's)");
  cmd->add_option("--iter-b", f->opts_b.iteration, "iteration of b (default: its tracker's)");
  AddJsonFlags(cmd, &f->json, &f->no_progress, "machine-readable output");
  cmd->callback([=]() { *outcome = RunDiff(*f); });
}

std::shared_ptr<ConvertFlags> RegisterConvert(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand(
      "convert", "Convert between ckpt and HF safetensors (Llama) or one torch.save file (docs: README \"Convert\")");
  auto f = std::make_shared<ConvertFlags>();
  cmd->add_option("src", f->src, "source: a HF model directory (--to ckpt) or a checkpoint root")->required();
  cmd->add_option("dst", f->dst, "destination: checkpoint root, HF directory, or .pt file")->required();
  cmd->add_option("--to", f->to, "ckpt (HF -> ckpt), hf (ckpt -> HF safetensors) or torch (ckpt -> torch.save)")->required();
  cmd->add_option("--layout", f->layout, "--to ckpt: target layout, e.g. tp=4,pp=2 or pp=4,vpp=2");
  cmd->add_option("--iter", f->iteration, "--to ckpt: iteration to write (0); else the one to read (latest)");
  cmd->add_flag("--mcore", f->mcore, "--to ckpt: Megatron-Core training's keys: --stack-layers --extra-state");
  cmd->add_flag("--stack-layers", f->stack_layers, "--to ckpt: keys decoder.layers.<name> with a layer axis");
  cmd->add_flag("--extra-state", f->extra_state, "--to ckpt: MCore's _extra_state objects of the linear layers");
  cmd->add_option("--vocab-divisible-by", f->vocab_divisible_by, "--to ckpt: pad the vocab to a multiple of this x TP");
  cmd->add_option("--compress", f->compression, "--to ckpt: none or zstd");
  cmd->add_option("--chunk-kb", f->chunk_kb, "--to ckpt: target chunk size in KiB");
  cmd->add_option("--max-shard-mb", f->max_shard_mb, "--to hf: largest safetensors file in MiB (> 0, fractions allowed; default 5120)");
  cmd->add_flag("--keep-vocab-padding", f->keep_padding, "--to torch: keep the padded vocab rows");
  AddJsonFlags(cmd, &f->json, &f->no_progress, "machine-readable output");
  cmd->callback([=]() { *outcome = RunConvert(*f); });
  return f;
}

}  // namespace ckpt::cli
