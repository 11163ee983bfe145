// ckpt save: a real multi-rank GPT job (run under mpirun) that saves its
// Megatron-Core sharded state (optionally with distributed-optimizer state).
// The job is library code (ckpt/workload/gpt_job.h); this file parses the
// options, calls SaveCheckpoint and prints.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "ckpt/base/clock.h"
#include "ckpt/mpi/arrival_lags.h"
#include "ckpt/mpi/comm_mpi.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/stats_json.h"
#include "ckpt/workload/rank_report.h"
#include "cli/commands.h"
#include "cli/harness_seam.h"
#include "cli/progress.h"
#include "cli/job_flags.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"

namespace ckpt::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

SaveOptions Options(const JobFlags& f, const GptJob& j, Compression comp, ChunkHash hash) {
  SaveOptions o;
  o.root = f.root;
  o.iteration = f.iteration;
  o.comm = j.comm.get();
  o.timeout = Millis(f.timeout_ms);
  o.write.codec.compression = comp;
  o.write.hash = hash;
  o.write.chunk_bytes = f.chunk_kb * 1024;
  if (f.encode_threads >= 0) o.write.encode_threads = f.encode_threads;
  if (f.direct_io || f.buffered_io) o.write.direct_io = f.direct_io;  // else CKPT_DIRECT_IO decides (on unless 0)
  o.balance_replicas = !f.no_balance;
  o.allow_older = f.allow_older;
  o.layout = reshard::LayoutToJson(j.layout);
  o.metadata = {{"model", reshard::GptModelMetadata(j.model, j.model_name)}};
  if (j.optimizer_spec.format) o.metadata["optimizer"] = OptimizerMetadata(j.optimizer_spec);
  return o;
}

// A committed save whose outcome or report missed a peer by the deadline (a
// node lost after the votes): the save stands, but MPI_Finalize would wait for
// the lost peer forever (a partitioned node), so main ends the job as after a
// failed save (NoteDeadlineFailed). Whether this rank timed out itself or
// root relayed it, the code is kTimeout.
void EndJobIfPeerLost(const Status& warning) {
  if (warning.code() == Code::kTimeout) NoteDeadlineFailed();
}

// Rank 0, the root of the save's gathers: the rank whose messages reached it
// latest for a reason other than its own write (its lag less how much longer
// than the fastest writer it wrote: a slow writer sends its vote late too),
// with host and phase (arrival_lags.h); null below kSlowLinkS (polling jitter).
json SlowLink(const GptJob& j, const json& per_rank) {
  constexpr double kSlowLinkS = 0.25;
  double fastest = 1e300, most = kSlowLinkS;
  for (const json& r : per_rank) fastest = std::min(fastest, r["write_s"].get<double>());
  json worst = nullptr;
  for (const auto& [phase, lags] : MpiArrivalLags().by_phase)
    for (size_t r = 0; r < lags.size() && r < per_rank.size(); ++r) {
      const double own = phase == Phase::kVote ? per_rank[r]["write_s"].get<double>() - fastest : 0.0;
      if (lags[r] - own < most) continue;
      most = lags[r] - own;
      worst = {{"rank", r}, {"host", j.comm->host(int(r))}, {"phase", std::string(PhaseName(phase))}, {"lag_seconds", most}};
    }
  return worst;
}

// The job-wide figures (collective) as JSON, and the text line.
Status Report(const JobFlags& f, GptJob& j, const SaveOptions& o, const SaveStats& r, double secs) {
  auto all = j.AllGatherJson(SaveStatsJson(r));  // every rank's stats, their one JSON form
  if (!all.ok()) {  // committed all the same: a missing report is a warning, never a failed save
    EndJobIfPeerLost(all.status());
    std::fprintf(stderr, "ckpt save: rank %d: committed iteration %lld, but the report gather failed: %s\n",
                 j.rank(), static_cast<long long>(o.iteration), all.status().ToString().c_str());
    return Status::Ok();
  }
  auto total = workload::SumOf(*all, "bytes_written"), mx = workload::MaxOf(*all, "bytes_written"),
       mn = workload::MinOf(*all, "bytes_written");
  auto ranks = workload::ReduceSaveReports(*all);  // per-rank phases and the straggler
  if (!total.ok() || !mx.ok() || !mn.ok() || !ranks.ok())
    return Fail("save", j.rank(), Status::Internal("malformed save report"));
  json out = {{"op", "save"},      {"iteration", o.iteration}, {"layout", j.layout.ToString()},
              {"model", j.model_name}, {"ranks", j.comm->size()}, {"bytes", *total},
              {"seconds", secs},   {"mb_per_s", *total / 1e6 / secs},
              {"max_rank_bytes", *mx}, {"min_rank_bytes", *mn}, {"phase_seconds", r.phase_seconds},
              {"optimizer", f.optimizer}, {"per_rank", (*ranks)["per_rank"]}, {"straggler", (*ranks)["straggler"]}};
  if (!r.warning.ok()) out["warning"] = r.warning.ToString();
  out["slow_link"] = j.rank() == 0 ? SlowLink(j, (*ranks)["per_rank"]) : json(nullptr);
  if (o.write.direct_io) {  // every rank's file: which went direct, and how many bytes each way
    int64_t ranks_direct = 0;
    for (const json& a : *all) ranks_direct += a.value("direct_io_active", false) ? 1 : 0;
    const int64_t direct = *workload::SumOf(*all, "direct_write_bytes");
    const int64_t buffered = *workload::SumOf(*all, "buffered_write_bytes");
    out["direct_io"] = {{"mode", "on"}, {"ranks_direct", ranks_direct}, {"direct_write_bytes", direct},
                        {"buffered_write_bytes", buffered}, {"fallback", (*all)[0].value("direct_io_fallback", "")},
                        // deprecated aliases (one release; stats_json.h)
                        {"direct_bytes", direct}, {"buffered_bytes", buffered}};
  } else {
    out["direct_io"] = {{"mode", "off"}};
  }
  if (f.json)
    Print0(j, "%s\n", out.dump().c_str());
  else
    Print0(j, "save  iter %lld  %s  model %s: %.1f MB in %.3f s = %.0f MB/s; bytes per rank max %.1f MB / min %.1f MB (%.2fx)\n",
           static_cast<long long>(o.iteration), j.layout.ToString().c_str(), j.model_name.c_str(), *total / 1e6, secs,
           *total / 1e6 / secs, *mx / 1e6, *mn / 1e6, *mn > 0 ? double(*mx) / double(*mn) : 0.0);
  const json& s = (*ranks)["straggler"];
  if (!f.json)
    Print0(j, "save  slowest writer: rank %d, write %.3f s (median %.3f s, %.1fx); longest wait: rank %d, %.3f s\n",
           s["rank"].get<int>(), s["seconds"].get<double>(), s["median_seconds"].get<double>(),
           s["ratio"].get<double>(), s["longest_wait_rank"].get<int>(), s["longest_wait_seconds"].get<double>());
  if (const json& l = out["slow_link"]; !f.json && !l.is_null())
    Print0(j, "save  slow link: rank %d on host '%s', phase '%s': its messages reached rank 0 %.3f s after the first\n",
           l["rank"].get<int>(), l["host"].get<std::string>().c_str(), l["phase"].get<std::string>().c_str(),
           l["lag_seconds"].get<double>());
  return Status::Ok();
}

Result<std::unique_ptr<GptJob>> Start(const JobFlags& f) {
  std::string name;
  CKPT_ASSIGN_OR_RETURN(auto model, ResolveModel(f.model.empty() ? "tiny" : f.model, f.root, -1, &name));
  CKPT_ASSIGN_OR_RETURN(auto spec, SaveOptimizerSpec(f.optimizer, f.bucket_elems));
  return StartGptJob(f.layout, model, name, spec);
}

// --allow-older: says that 'latest' still picks the newer iteration.
void NoteOlder(const JobFlags& f, const GptJob& j) {
  if (auto iters = ListIterations(DefaultEnv(), f.root);
      f.allow_older && iters.ok() && !iters->empty() && iters->back() > f.iteration)
    Print0(j, "ckpt save: --allow-older: saving iteration %lld below iteration %lld under the root; 'latest' "
              "(inspect, train --resume, load) still picks %lld\n",
           static_cast<long long>(f.iteration), static_cast<long long>(iters->back()),
           static_cast<long long>(iters->back()));
}

}  // namespace

Status RunSave(const JobFlags& f) {
  if (f.iteration < 0)
    return Fail("save", -1, Status::InvalidArgument("--iter " + std::to_string(f.iteration) + ": an iteration is >= 0"));
  auto job = Start(f);
  if (!job.ok()) return Fail("save", -1, job.status());
  GptJob& j = **job;
  j.timeout = Millis(f.timeout_ms);
  Status st = ApplyNaiveFc1(f, j);
  if (st.ok()) st = j.FillExpected();
  if (!st.ok()) return Fail("save", j.rank(), st);
  auto comp = ParseCompression(f.compression);
  if (!comp.ok()) return Fail("save", j.rank(), comp.status());
  auto hash = ParseChunkHash(f.hash);
  if (!hash.ok()) return Fail("save", j.rank(), hash.status().WithContext("--hash"));
  const SaveOptions o = Options(f, j, *comp, *hash);
  NoteOlder(f, j);
  auto sd = j.StateDict();
  if (!sd.ok()) return Fail("save", j.rank(), sd.status());
  CKPT_RETURN_IF_ERROR(j.comm->Barrier(o.timeout, Phase::kStart));
  ResetMpiArrivalLags();  // this save's gathers only
  const auto t0 = Clock::now();
  FaultedEnv faulted;  // --faults (ckpt-lab): the fault plan's Env and step hook
  SaveOptions fo = o;
  if (!f.faults.empty()) {
    if (!Harness().fault_env) return Fail("save", j.rank(), NoHarness("--faults"));
    auto fe = Harness().fault_env(DefaultEnv(), FaultRequest{f.faults, j.rank(), f.root, ""});
    if (!fe.ok()) return Fail("save", j.rank(), fe.status());
    faulted = std::move(fe).value();
    fo.env = faulted.env.get();
    fo.hook = faulted.hook;
  }
  // Rank 0's own writes; the total is its raw tensor bytes (an estimate: HDF5 metadata, compression).
  CliProgress progress("save", f.json, f.no_progress, j.rank(), fo.env ? fo.env : DefaultEnv(),
                       /*count_writes=*/true, ".h5");
  progress.SetTotals(sd->TotalBytes(), 1);
  fo.env = progress.env();
  auto r = SaveCheckpoint(*sd, fo);
  progress.Finish();
  const double secs = Since(t0);
  if (!r.ok()) return Fail("save", j.rank(), r.status());
  if (!r->warning.ok()) {  // committed all the same (checkpoint.h): a warning, exit 0
    EndJobIfPeerLost(r->warning);
    std::fprintf(stderr, "ckpt save: rank %d: committed iteration %lld, but %s\n", j.rank(),
                 static_cast<long long>(o.iteration), r->warning.message().c_str());
  }
  return Report(f, j, o, *r, secs);
}

}  // namespace ckpt::cli
