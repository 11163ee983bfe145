// ckpt load: a real multi-rank GPT job (run under mpirun) that loads a
// checkpoint saved under any layout into its own layout and checks every
// element, reporting each rank's peak extra RSS during the load. The job and
// the per-rank figures are library code (ckpt/workload/gpt_job.h,
// rank_report.h); this file parses the options, calls LoadCheckpoint and prints.
#include <chrono>
#include <cstdio>

#include "ckpt/base/clock.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/stats_json.h"
#include "ckpt/workload/rank_report.h"
#include "cli/commands.h"
#include "cli/harness_seam.h"
#include "cli/progress.h"
#include "cli/job_flags.h"

namespace ckpt::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// A started load job: the rank, what it asked for, and its options.
struct LoadJob {
  std::unique_ptr<GptJob> job;
  OptimizerSpec spec;
  Result<Manifest> saved = Status::NotFound("not read");
  std::unique_ptr<Comm> share;
  LoadOptions o;
};

// The rank's load options and read-sharing group; the bucket-layout precheck
// (a failure is reported by rank 0 only, *reported set).
Status Prepare(const JobFlags& f, LoadJob& l, int64_t iteration, bool* reported) {
  GptJob& j = *l.job;
  CKPT_RETURN_IF_ERROR(ApplyNaiveFc1(f, j));
  Status pre;  // agreed by every rank; rank 0 reports it
  if (l.spec.format == reshard::OptimizerFormat::kBucketSpace) pre = PrecheckBucketLayout(j, f.root, iteration);
  if (l.spec.format == reshard::OptimizerFormat::kDpReshardable) pre = PrepareDpReshardableLoad(j, f.root, iteration);
  if (!pre.ok() && j.rank() == 0) Fail("load", 0, pre).IgnoreError();
  *reported = !pre.ok();
  CKPT_RETURN_IF_ERROR(pre);
  l.o.root = f.root;
  l.o.iteration = f.iteration;  // -1: the loader resolves "latest" and notes newer iterations it skips
  l.o.comm = j.comm.get();
  l.o.timeout = Millis(f.timeout_ms);
  l.o.fallback = f.fallback;
  CKPT_ASSIGN_OR_RETURN(l.o.strict, ParseStrictMode(f.strict));
  CKPT_ASSIGN_OR_RETURN(l.share, ShareComm(j, f.share_reads, f.share_transport, l.o.timeout));
  l.o.share_comm = l.share.get();
  l.o.share_round_bytes = f.share_round_mb << 20;
  l.o.direct_io = ReadModeOf(f.direct_io, f.buffered_io, l.o.direct_io);
  if (f.load_threads >= 0) l.o.threads = f.load_threads;
  return Status::Ok();
}

// Model and optimizer resolution, job start-up, Prepare. A failure is
// printed naming the rank.
Result<LoadJob> Start(const JobFlags& f) {
  LoadJob l;
  std::string name;
  const int64_t iteration = ResolveLoadIteration(f.root, f.iteration);
  auto model = ResolveModel(f.model, f.root, iteration, &name);
  l.saved = workload::ReadManifestOrOlder(f.root, iteration);
  auto spec = model.ok() ? LoadOptimizerSpec(f.optimizer, f.bucket_elems,
                                             l.saved.ok() ? l.saved->metadata : json::object())
                         : Result<OptimizerSpec>(model.status());
  auto job = spec.ok() ? StartGptJob(f.layout, *model, name, *spec) : Result<std::unique_ptr<GptJob>>(spec.status());
  if (!job.ok()) return Fail("load", -1, job.status());
  l.spec = *spec;
  l.job = std::move(job).value();
  l.job->timeout = Millis(f.timeout_ms);
  bool reported = false;
  Status st = Prepare(f, l, iteration, &reported);
  if (!st.ok()) return reported ? st : Fail("load", l.job->rank(), st);
  return l;
}

void PrintText(const GptJob& j, const json& out, const JobFlags& f) {
  const json& m = out["memory"];
  Print0(j, "load  iter %lld  %s <- %s: %.1f MB in %.3f s = %.0f MB/s; optimizer %s; elements checked %lld (optimizer %lld), mismatches %lld%s%s\n",
         out["iteration"].get<long long>(), j.layout.ToString().c_str(), out["saved_layout"].get<std::string>().c_str(),
         out["bytes"].get<double>() / 1e6, out["seconds"].get<double>(), out["mb_per_s"].get<double>(),
         out["optimizer"].get<std::string>().c_str(), out["elements_checked"].get<long long>(),
         out["optimizer_elements_checked"].get<long long>(), out["mismatches"].get<long long>(),
         out["first_mismatch"].get<std::string>().empty() ? "" : " first at ",
         out["first_mismatch"].get<std::string>().c_str());
  if (out["bytes_received"].get<int64_t>() > 0)
    Print0(j, "load  shared reads (%s): %.1f MB read from disk, %.1f MB received from the rank that read it (%lld rounds); max per rank %.1f MB\n",
           f.share_reads.c_str(), out["bytes"].get<double>() / 1e6, out["bytes_received"].get<double>() / 1e6,
           out["share_rounds"].get<long long>(), out["max_rank_bytes"].get<double>() / 1e6);
  Print0(j, "load  memory: peak extra RSS %.1f MB (max over ranks%s); local state max %.1f MB; largest local shard %.1f MB; largest chunk %.1f MB\n",
         m["peak_extra_rss_max"].get<double>() / 1e6, m["peak_reset"].get<bool>() ? "" : ", peak not resettable: upper bound",
         m["local_state_bytes_max"].get<double>() / 1e6, m["largest_local_shard_bytes_max"].get<double>() / 1e6,
         m["largest_chunk_bytes"].get<double>() / 1e6);
}

// Checks the values (unless --no-check), gathers every rank's figures and prints.
Status Report(const JobFlags& f, LoadJob& l, const LoadStats& r, const workload::LoadMemory& mem, double secs) {
  GptJob& j = *l.job;
  PrintLoadWarnings(j, f, r);
  int64_t mismatches = 0, opt_bad = 0;
  std::string first_bad;
  if (!f.no_check) {
    auto bad = j.CountMismatches(&first_bad, &opt_bad);
    if (!bad.ok()) return Fail("load", j.rank(), bad.status());
    mismatches = *bad;
  }
  json mine = LoadStatsJson(r);  // the stats' one JSON form, and the CLI's own figures
  mine.update({{"bad", mismatches}, {"opt_bad", opt_bad},
               {"opt_elements", j.optimizer ? j.optimizer->StateElements() : 0}, {"first_bad", first_bad},
               {"rss_before", mem.rss_before}, {"peak", mem.peak}, {"extra", mem.extra()}, {"state", mem.state},
               {"largest_shard", mem.largest_shard}, {"peak_reset", mem.peak_reset}});
  auto all = j.AllGatherJson(mine);
  auto sum = all.ok() ? workload::ReduceLoadReports(*all) : Result<json>(all.status());
  if (!sum.ok()) return Fail("load", j.rank(), sum.status());
  const json& s = *sum;
  // The iteration loaded may not be the one asked for (--fallback, an empty tracker).
  if (!l.saved.ok() || l.saved->iteration != r.iteration) l.saved = ReadManifest(DefaultEnv(), f.root, r.iteration);
  const int64_t bytes = s["bytes"];
  const int64_t checked = f.no_check ? 0 : s["elements"].get<int64_t>() + s["zero_filled"].get<int64_t>();
  json out = {
      {"op", "load"}, {"iteration", r.iteration}, {"layout", j.layout.ToString()},
      {"saved_layout", l.saved.ok() ? l.saved->layout.dump() : "?"}, {"ranks", j.comm->size()}, {"bytes", bytes},
      {"seconds", secs}, {"mb_per_s", bytes / 1e6 / secs}, {"elements_checked", checked},
      {"share_reads", f.share_reads}, {"share_transport", f.share_transport}, {"bytes_received", s["received"]},
      {"max_rank_bytes", s["max_rank_bytes"]}, {"share_rounds", s["rounds"]},
      {"delivered_mb_per_s", (bytes + s["received"].get<int64_t>()) / 1e6 / secs}, {"mismatches", s["bad"]},
      {"first_mismatch", s["first_bad"]},
      {"optimizer", l.spec.format ? std::string(reshard::OptimizerFormatName(*l.spec.format)) : "none"},
      {"optimizer_elements_checked", f.no_check ? 0 : s["opt_elements"].get<int64_t>()},
      {"optimizer_mismatches", s["opt_bad"]},
      {"memory", {{"peak_extra_rss_max", s["extra"]}, {"local_state_bytes_max", s["state"]},
                  {"largest_local_shard_bytes_max", s["largest_shard"]},
                  {"largest_chunk_bytes", l.saved.ok() ? workload::LargestChunk(*l.saved) : -1},
                  {"peak_reset", s["peak_reset"]}, {"per_rank", s["per_rank"]}}}};
  {  // every rank's reads: bytes that went direct, files read buffered for being cached, why not direct
    std::string fallback;
    for (const auto& a : *all)
      if (fallback.empty()) fallback = a.value("direct_io_fallback", std::string());
    const int64_t direct = *workload::SumOf(*all, "direct_read_bytes");
    out["direct_io"] = {{"mode", DirectReadName(l.o.direct_io)}, {"direct_read_bytes", direct},
                        {"files_cached", *workload::SumOf(*all, "files_cached")}, {"fallback", fallback},
                        {"direct_bytes", direct}};  // deprecated alias of direct_read_bytes (one release)
  }
  // What was loaded and skipped: the iteration asked for (-1: latest), those
  // passed over with why (a --fallback, a lagging tracker), keys not loaded.
  out.update({{"requested_iteration", f.iteration}, {"skipped", r.skipped}, {"missing_keys", r.missing_keys},
              {"unexpected_keys", r.unexpected_keys}});
  if (f.json)
    Print0(j, "%s\n", out.dump().c_str());
  else
    PrintText(j, out, f);
  if (s["bad"].get<int64_t>() == 0) return Status::Ok();
  return CheckFailed(std::to_string(s["bad"].get<int64_t>()) + " element(s) differ from the expected values");
}

}  // namespace

Status RunLoad(const JobFlags& f) {
  auto started = Start(f);
  if (!started.ok()) return started.status();
  LoadJob& l = *started;
  GptJob& j = *l.job;
  auto sd = j.StateDict();
  if (!sd.ok()) return Fail("load", j.rank(), sd.status());
  CKPT_RETURN_IF_ERROR(j.comm->Barrier(l.o.timeout, Phase::kStart));
  workload::MemoryProbe probe;
  workload::LoadMemory mem{.state = j.StateBytes(), .largest_shard = workload::LargestShard(*sd)};
  mem.peak_reset = probe.ResetPeak();
  mem.rss_before = probe.Rss();
  const auto t0 = Clock::now();
  // Rank 0's own reads; the total is the raw bytes it asked for (shared reads,
  // compression and HDF5 metadata make the stored bytes differ: an estimate).
  CliProgress progress("load", f.json, f.no_progress, j.rank(), l.o.env ? l.o.env : DefaultEnv(),
                       /*count_writes=*/false, ".h5");
  progress.SetTotals(sd->TotalBytes(), 0);
  LoadOptions lo = l.o;
  lo.env = progress.env();
  FaultedEnv faulted;  // --faults (ckpt-lab): the plan's env points, under the progress count
  if (!f.faults.empty()) {
    if (!Harness().fault_env) return Fail("load", j.rank(), NoHarness("--faults"));
    auto fe = Harness().fault_env(lo.env, FaultRequest{f.faults, j.rank(), f.root, ""});
    if (!fe.ok()) return Fail("load", j.rank(), fe.status());
    faulted = std::move(fe).value();
    lo.env = faulted.env.get();
  }
  auto r = LoadCheckpoint(*sd, lo);
  progress.Finish();
  const double secs = Since(t0);
  mem.peak = probe.Peak();
  if (!r.ok()) return Fail("load", j.rank(), r.status());  // agreed by the loader: the same on every rank
  return Report(f, l, *r, mem, secs);
}

}  // namespace ckpt::cli
