// ckpt save / ckpt load: a real multi-rank GPT job (run under mpirun) that
// saves its Megatron-Core sharded state (optionally with distributed-optimizer
// state), or loads a checkpoint saved under any layout into its own layout and
// checks every element, reporting each rank's peak extra RSS during the load.
#include <chrono>
#include <cstdio>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/gpu/gpu.h"
#include "cli/commands.h"
#include "cli/gpt_job.h"
#include "reshard/gpt_config_json.h"

namespace ckpt::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct JobFlags {
  std::string root, model, layout = "tp=1", compression = "none", optimizer, share_reads = "dp",
              share_transport = "mpi", strict = "all";
  int64_t iteration = -1;
  int64_t share_round_mb = 64;
  int64_t bucket_elems = -1;
  int64_t chunk_kb = 4096;
  int encode_threads = -1;  // -1: DefaultEncodeThreads()
  int64_t timeout_ms = 60000;
  bool json = false, naive_fc1 = false, no_balance = false, fallback = false, no_check = false;
};

void AddCommon(CLI::App* cmd, JobFlags* f) {
  cmd->add_option("--root", f->root, "checkpoint root directory")->required();
  cmd->add_option("--layout", f->layout, "this job's layout, e.g. tp=4,pp=2,dp=1 (world = tp*cp*dp*pp)");
  cmd->add_option("--timeout-ms", f->timeout_ms, "deadline of every collective");
  cmd->add_flag("--naive-fc1", f->naive_fc1, "negative control: register SwiGLU fc1 as a plain axis-0 slice");
  cmd->add_flag("--json", f->json, "print the summary as JSON");
  cmd->add_option("--bucket-elems", f->bucket_elems,
                  "DDP bucket size in elements for the optimizer layout (0: one bucket per buffer)");
}

int Fail(const char* cmd, int rank, const Status& st) {
  std::fprintf(stderr, "ckpt %s: rank %d: %s\n", cmd, rank, st.ToString().c_str());
  return st.code() == Code::kCorruption ? kExitCheckFailed : kExitError;
}

// A failed load: every rank prints its error and exits with the agreed code.
int FailLoad(GptJob& j, const Status& st, Millis timeout) {
  Fail("load", j.rank(), st);
  return AgreedLoadExitCode(j.comm.get(), st, timeout);
}

// The communicator whose ranks share load reads (load_share.h): "dp" = ranks
// with the same TP and PP coordinates (the DP x CP group of MCore's fully
// parallel load), "job" = every rank, "none" = each rank reads what it needs.
// Collective over the job (MPI_Comm_split) for dp.
// `transport` mpi keeps the bytes on MPI; nccl moves them over NCCL (the GPU
// path, ckpt/gpu/gpu.h), the control messages staying on MPI.
Result<std::unique_ptr<Comm>> ShareComm(GptJob& j, const std::string& mode, const std::string& transport,
                                        Millis timeout) {
  if (transport != "mpi" && transport != "nccl")
    return Status::InvalidArgument("--share-transport must be mpi or nccl, not '" + transport + "'");
  std::unique_ptr<MpiComm> group;
  if (mode == "none") return std::unique_ptr<Comm>();
  if (mode == "job") {
    CKPT_ASSIGN_OR_RETURN(group, j.comm->Split(0, j.rank()));
  } else if (mode == "dp") {
    CKPT_ASSIGN_OR_RETURN(group, j.comm->Split(j.coords.tp + j.layout.tp * j.coords.pp, j.rank()));
  } else {
    return Status::InvalidArgument("--share-reads must be none, dp or job, not '" + mode + "'");
  }
  // A group of one shares nothing (LoadOptions::share_comm): no device needed.
  if (transport == "nccl" && group->size() > 1) return gpu::MakeNcclComm(std::move(group), timeout);
  return std::unique_ptr<Comm>(std::move(group));
}

double Secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

int RunSave(const JobFlags& f) {
  std::string name;
  auto model = ResolveModel(f.model.empty() ? "tiny" : f.model, f.root, -1, &name);
  if (!model.ok()) return Fail("save", -1, model.status());
  auto spec = SaveOptimizerSpec(f.optimizer, f.bucket_elems);
  if (!spec.ok()) return Fail("save", -1, spec.status());
  auto job = StartGptJob(f.layout, *model, name, f.naive_fc1, *spec);
  if (!job.ok()) return Fail("save", -1, job.status());
  GptJob& j = **job;
  Status st = j.FillExpected();
  if (!st.ok()) return Fail("save", j.rank(), st);
  auto comp = ParseCompression(f.compression);
  if (!comp.ok()) return Fail("save", j.rank(), comp.status());

  SaveOptions o;
  o.root = f.root;
  o.iteration = f.iteration < 0 ? 0 : f.iteration;
  o.comm = j.comm.get();
  o.timeout = Millis(f.timeout_ms);
  o.write.codec.compression = *comp;
  o.write.chunk_bytes = f.chunk_kb * 1024;
  if (f.encode_threads >= 0) o.write.encode_threads = f.encode_threads;
  o.balance_replicas = !f.no_balance;
  o.layout = reshard::LayoutToJson(j.layout);
  o.metadata = {{"model", name}, {"gpt", ModelToJson(*model)}};
  if (spec->format) o.metadata["optimizer"] = OptimizerMetadata(*spec);
  auto sd_or = j.StateDict();
  if (!sd_or.ok()) return Fail("save", j.rank(), sd_or.status());
  ShardedStateDict& sd = *sd_or;
  if (!j.comm->Barrier(o.timeout, "start").ok()) return kExitError;
  const auto t0 = Clock::now();
  auto r = SaveCheckpoint(sd, o);
  const double secs = Secs(t0);
  if (!r.ok()) return Fail("save", j.rank(), r.status());
  if (!r->warning.ok())  // committed all the same (checkpoint.h): a warning, exit 0
    std::fprintf(stderr, "ckpt save: rank %d: committed iteration %lld, but %s\n", j.rank(),
                 static_cast<long long>(o.iteration), r->warning.message().c_str());
  auto all = j.AllGatherJson({{"bytes", r->bytes_written}, {"file", r->file_bytes}});
  if (!all.ok()) return Fail("save", j.rank(), all.status());
  int64_t total = 0, mx = 0, mn = INT64_MAX;
  for (const auto& a : *all) {
    int64_t b = a["bytes"].get<int64_t>();
    total += b;
    mx = std::max(mx, b);
    mn = std::min(mn, b);
  }
  json out = {{"op", "save"},      {"iteration", o.iteration}, {"layout", j.layout.ToString()},
              {"model", name},     {"ranks", j.comm->size()},  {"bytes", total},
              {"seconds", secs},   {"mb_per_s", total / 1e6 / secs},
              {"max_rank_bytes", mx}, {"min_rank_bytes", mn}, {"phase_seconds", r->phase_seconds},
              {"optimizer", f.optimizer}};
  if (!r->warning.ok()) out["warning"] = r->warning.ToString();
  if (f.json)
    Print0(j, "%s\n", out.dump().c_str());
  else
    Print0(j, "save  iter %lld  %s  model %s: %.1f MB in %.3f s = %.0f MB/s; bytes per rank max %.1f MB / min %.1f MB (%.2fx)\n",
           static_cast<long long>(o.iteration), j.layout.ToString().c_str(), name.c_str(), total / 1e6, secs,
           total / 1e6 / secs, mx / 1e6, mn / 1e6, mn > 0 ? double(mx) / double(mn) : 0.0);
  return kExitOk;
}

// One rank's memory during the load (bytes).
struct LoadMemory {
  int64_t rss_before = -1, peak = -1, state = 0, largest_shard = 0;
  bool peak_reset = false;
  int64_t extra() const { return peak >= 0 && rss_before >= 0 ? peak - rss_before : -1; }
};

int64_t LargestShard(const ShardedStateDict& sd) {
  int64_t mx = 0;
  for (const auto& t : sd.tensors()) mx = std::max(mx, t.meta.num_bytes());
  return mx;
}

int64_t LargestChunk(const Manifest& m) {
  int64_t mx = 0;
  for (const auto& s : m.shards)
    mx = std::max(mx, std::min(s.record.chunk_elems, s.meta.num_elements()) * int64_t(DTypeSize(s.meta.dtype)));
  return mx;
}

int RunLoad(const JobFlags& f) {
  std::string name;
  const int64_t iteration = ResolveLoadIteration(f.root, f.iteration);
  auto model = ResolveModel(f.model, f.root, iteration, &name);
  if (!model.ok()) return Fail("load", -1, model.status());
  auto saved = ReadManifest(DefaultEnv(), f.root, iteration);
  auto spec = LoadOptimizerSpec(f.optimizer, f.bucket_elems,
                                saved.ok() ? saved->metadata : nlohmann::json::object());
  if (!spec.ok()) return Fail("load", -1, spec.status());
  auto job = StartGptJob(f.layout, *model, name, f.naive_fc1, *spec);
  if (!job.ok()) return Fail("load", -1, job.status());
  GptJob& j = **job;
  if (spec->format == reshard::OptimizerFormat::kBucketSpace) {
    Status pre = PrecheckBucketLayout(j, f.root, iteration);
    if (!pre.ok()) return j.rank() == 0 ? Fail("load", 0, pre) : kExitError;
  }
  LoadOptions o;
  o.root = f.root;
  o.iteration = iteration;
  o.comm = j.comm.get();
  o.timeout = Millis(f.timeout_ms);
  o.fallback = f.fallback;
  auto strict = ParseStrictMode(f.strict);
  if (!strict.ok()) return Fail("load", j.rank(), strict.status());
  o.strict = *strict;
  auto share = ShareComm(j, f.share_reads, f.share_transport, o.timeout);
  if (!share.ok()) return Fail("load", j.rank(), share.status());
  o.share_comm = share->get();
  o.share_round_bytes = f.share_round_mb << 20;
  auto sd_or = j.StateDict();
  if (!sd_or.ok()) return Fail("load", j.rank(), sd_or.status());
  ShardedStateDict& sd = *sd_or;
  if (!j.comm->Barrier(o.timeout, "start").ok()) return kExitError;
  MemoryProbe probe;
  LoadMemory mem{.state = j.StateBytes(), .largest_shard = LargestShard(sd)};
  mem.peak_reset = probe.ResetPeak();
  mem.rss_before = probe.Rss();
  const auto t0 = Clock::now();
  auto r = LoadCheckpoint(sd, o);
  const double secs = Secs(t0);
  mem.peak = probe.Peak();
  if (!r.ok()) return FailLoad(j, r.status(), o.timeout);
  for (const auto* keys : {&r->missing_keys, &r->unexpected_keys})
    for (const auto& k : *keys)
      Print0(j, "load  %s key (strict %s): %s\n", keys == &r->missing_keys ? "missing" : "unexpected",
             f.strict.c_str(), k.c_str());
  int64_t mismatches = 0, opt_bad = 0;
  std::string first_bad;
  if (!f.no_check) {
    auto bad = j.CountMismatches(&first_bad, &opt_bad);
    if (!bad.ok()) return Fail("load", j.rank(), bad.status());
    mismatches = *bad;
  }
  const int64_t opt_elems = j.optimizer ? j.optimizer->StateElements() : 0;
  auto all = j.AllGatherJson({{"bytes", r->bytes_read}, {"received", r->bytes_received},
                              {"rounds", r->share_rounds}, {"elements", r->elements + r->zero_filled},
                              {"bad", mismatches}, {"opt_bad", opt_bad}, {"opt_elements", opt_elems},
                              {"first_bad", first_bad}, {"files", r->files_touched},
                              {"rss_before", mem.rss_before}, {"peak", mem.peak}, {"extra", mem.extra()},
                              {"state", mem.state}, {"largest_shard", mem.largest_shard},
                              {"peak_reset", mem.peak_reset}});
  if (!all.ok()) return Fail("load", j.rank(), all.status());
  int64_t bytes = 0, received = 0, rounds = 0, elements = 0, bad = 0, obad = 0, oelems = 0, extra = 0, state = 0,
          shard = 0, max_rank_bytes = 0;
  bool reset = true;
  std::string where;
  json per_rank = json::array();
  for (const auto& a : *all) {
    bytes += a["bytes"].get<int64_t>();
    max_rank_bytes = std::max(max_rank_bytes, a["bytes"].get<int64_t>());
    received += a["received"].get<int64_t>();
    rounds = std::max(rounds, a["rounds"].get<int64_t>());
    elements += a["elements"].get<int64_t>();
    bad += a["bad"].get<int64_t>();
    obad += a["opt_bad"].get<int64_t>();
    oelems += a["opt_elements"].get<int64_t>();
    extra = std::max(extra, a["extra"].get<int64_t>());
    state = std::max(state, a["state"].get<int64_t>());
    shard = std::max(shard, a["largest_shard"].get<int64_t>());
    reset = reset && a["peak_reset"].get<bool>();
    if (where.empty()) where = a["first_bad"].get<std::string>();
    per_rank.push_back({{"rss_before", a["rss_before"]}, {"peak", a["peak"]}, {"extra", a["extra"]},
                        {"state", a["state"]}});
  }
  // The iteration loaded may not be the one asked for (--fallback, an empty tracker).
  if (!saved.ok() || saved->iteration != r->iteration) saved = ReadManifest(DefaultEnv(), f.root, r->iteration);
  const int64_t chunk = saved.ok() ? LargestChunk(*saved) : -1;
  std::string from = saved.ok() ? saved->layout.dump() : "?";
  const std::string opt_name = spec->format ? std::string(reshard::OptimizerFormatName(*spec->format)) : "none";
  json out = {{"op", "load"},       {"iteration", r->iteration}, {"layout", j.layout.ToString()},
              {"saved_layout", from}, {"ranks", j.comm->size()}, {"bytes", bytes},
              {"seconds", secs},    {"mb_per_s", bytes / 1e6 / secs}, {"elements_checked", f.no_check ? 0 : elements},
              {"share_reads", f.share_reads}, {"share_transport", f.share_transport}, {"bytes_received", received}, {"max_rank_bytes", max_rank_bytes},
              {"share_rounds", rounds},
              {"delivered_mb_per_s", (bytes + received) / 1e6 / secs},
              {"mismatches", bad},  {"first_mismatch", where},
              {"optimizer", opt_name}, {"optimizer_elements_checked", f.no_check ? 0 : oelems},
              {"optimizer_mismatches", obad},
              {"memory", {{"peak_extra_rss_max", extra}, {"local_state_bytes_max", state},
                          {"largest_local_shard_bytes_max", shard}, {"largest_chunk_bytes", chunk},
                          {"peak_reset", reset}, {"per_rank", per_rank}}}};
  if (f.json) {
    Print0(j, "%s\n", out.dump().c_str());
  } else {
    Print0(j, "load  iter %lld  %s <- %s: %.1f MB in %.3f s = %.0f MB/s; optimizer %s; elements checked %lld (optimizer %lld), mismatches %lld%s%s\n",
           static_cast<long long>(r->iteration), j.layout.ToString().c_str(), from.c_str(), bytes / 1e6, secs,
           bytes / 1e6 / secs, opt_name.c_str(), static_cast<long long>(f.no_check ? 0 : elements),
           static_cast<long long>(f.no_check ? 0 : oelems), static_cast<long long>(bad),
           where.empty() ? "" : " first at ", where.c_str());
    if (received > 0)
      Print0(j, "load  shared reads (%s): %.1f MB read from disk, %.1f MB received from the rank that read it (%lld rounds); max per rank %.1f MB\n",
             f.share_reads.c_str(), bytes / 1e6, received / 1e6, static_cast<long long>(rounds), max_rank_bytes / 1e6);
    Print0(j, "load  memory: peak extra RSS %.1f MB (max over ranks%s); local state max %.1f MB; largest local shard %.1f MB; largest chunk %.1f MB\n",
           extra / 1e6, reset ? "" : ", peak not resettable: upper bound", state / 1e6, shard / 1e6, chunk / 1e6);
  }
  return bad == 0 ? kExitOk : kExitCheckFailed;
}

}  // namespace

void RegisterSave(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("save", "Save a GPT model state from a multi-rank job (run under mpirun)");
  auto f = std::make_shared<JobFlags>();
  AddCommon(cmd, f.get());
  cmd->add_option("--iter", f->iteration, "iteration number")->required();
  cmd->add_option("--model", f->model, "GPT preset (tiny, demo) with optional overrides (tiny:tied_embeddings=true,first_stage_layers=3) or a config JSON");
  cmd->add_option("--compress", f->compression, "none or zstd");
  cmd->add_option("--chunk-kb", f->chunk_kb, "target chunk size in KiB");
  cmd->add_option("--encode-threads", f->encode_threads,
                  "pad/compress/hash workers per rank (0: serial; default: cores per local rank)");
  cmd->add_flag("--no-balance", f->no_balance, "write replicas on their main holder only");
  f->optimizer = "none";
  cmd->add_option("--optimizer", f->optimizer,
                  "distributed-optimizer state to save: none, model (model space: reshardable across "
                  "DP/TP/PP/EP/bucket size) or bucket (raw bucket slices: same layout only)");
  cmd->callback([=]() { *exit_code = RunSave(*f); });
}

void RegisterLoad(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("load", "Load a checkpoint into this job's layout and check every element");
  auto f = std::make_shared<JobFlags>();
  AddCommon(cmd, f.get());
  cmd->add_option("--iter", f->iteration,
                  "iteration (default: the latest, the newest committed one at or above the tracker's)");
  cmd->add_option("--model", f->model, "GPT preset[:k=v,...] or config JSON; ':k=v,...' adjusts the checkpoint's config (default: as saved)");
  cmd->add_flag("--fallback", f->fallback, "if the latest checkpoint is damaged, load the newest one that verifies");
  cmd->add_flag("--no-check", f->no_check, "skip the element check");
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
  cmd->add_option("--optimizer", f->optimizer,
                  "optimizer state to load: auto (as saved), none, model or bucket");
  cmd->callback([=]() { *exit_code = RunLoad(*f); });
}

}  // namespace ckpt::cli
