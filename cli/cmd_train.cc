// ckpt train: the deterministic training workload (ckpt/workload/) as a real
// multi-rank job under mpirun. Loop, schedule and summary are library code
// (ckpt/workload/train_loop.h); this file starts the job (MPI, layout, model,
// workload, saver: cli/train_saver.h) and prints. Its options:
// cli/flags_jobs.cc; the harness switches (negative controls, a kill after a
// save, a NaN fault) only in ckpt-lab: harness/lab/lab_flags.cc;
// --exit-signal-handler: ckpt/workload/exit_signal.h.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "ckpt/mpi/comm_mpi.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/workload/exit_signal.h"
#include "ckpt/workload/job_setup.h"
#include "ckpt/workload/rank_report.h"
#include "ckpt/workload/train_loop.h"
#include "ckpt/workload/train_workload.h"
#include "cli/commands.h"
#include "cli/job_commands.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;

struct Job {
  std::unique_ptr<MpiSession> session;
  std::unique_ptr<MpiComm> comm;
  ParallelConfig layout;
  std::unique_ptr<workload::TrainWorkload> work;
  std::unique_ptr<workload::MpiCollectives> coll;
  std::unique_ptr<TrainSaver> saver;
  double mpi_up = -1;  // seconds from process start to MPI initialised (restart profile)
  int rank() const { return comm ? comm->rank() : -1; }
};

void Print0(const Job& j, const std::string& s) {
  if (j.rank() != 0) return;
  std::fputs(s.c_str(), stdout);
  std::fflush(stdout);
}

// Every rank reports its own failure unless it is just the echo of another
// rank's; a status all ranks agreed on (`agreed`) is reported by rank 0 only.
// Before the job has a communicator (bad flags: every rank fails the same
// way) only the launcher's rank 0 reports.
Status Fail(const Job& j, const Status& st, bool agreed = false) {
  if (j.rank() < 0) {
    const char* launcher_rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (!launcher_rank || std::string(launcher_rank) == "0")
      std::fprintf(stderr, "ckpt train: %s\n", st.ToString().c_str());
  } else if (agreed ? j.rank() == 0 : (st.code() != Code::kAborted || j.rank() == 0)) {
    std::fprintf(stderr, "ckpt train: rank %d: %s\n", j.rank(), st.ToString().c_str());
  }
  return st;  // typed: a refused NaN/Inf save carries Phase::kNonFiniteGuard on every rank (exit 1)
}

Result<SaveOptions> SaveTemplate(const Job& j, const TrainFlags& f) {
  SaveOptions o;
  CKPT_ASSIGN_OR_RETURN(o.nonfinite, workload::ParseNonFinitePolicy(f.nonfinite));
  CKPT_ASSIGN_OR_RETURN(o.write.codec.compression, ParseCompression(f.compression));
  CKPT_ASSIGN_OR_RETURN(o.write.hash, ParseChunkHash(f.save.hash));
  o.root = f.root;
  o.comm = j.comm.get();
  o.timeout = Millis(f.timeout_ms);
  o.allow_older = f.allow_older;
  o.layout = reshard::LayoutToJson(j.layout);
  nlohmann::json model = reshard::ModelMetadata(*reshard::MegatronGptFamily(), f.cfg.model);
  model["name"] = f.model;
  o.metadata = {{"model", model}, {"train", j.work->config().ArgsJson()}};
  return o;
}

Result<Job> StartJob(TrainFlags& f) {
  Job j;
  CKPT_ASSIGN_OR_RETURN(j.session, MpiSession::Init(nullptr, nullptr));
  CKPT_ASSIGN_OR_RETURN(j.comm, MpiComm::Create());
  j.mpi_up = workload::ProcessAgeSeconds();
  CKPT_ASSIGN_OR_RETURN(j.layout, workload::JobLayout(f.layout, *j.comm));
  CKPT_ASSIGN_OR_RETURN(RankCoords coords, workload::JobCoords(j.layout, *j.comm));
  std::string preset;
  CKPT_ASSIGN_OR_RETURN(reshard::GptConfig model, workload::ResolveModel(f.model, f.root, -1, &preset));
  CKPT_ASSIGN_OR_RETURN(f.cfg.mode, workload::ParseTrainMode(f.mode));
  f.cfg.model_name = f.model;
  f.cfg.model = reshard::GptConfigToJson(model);
  f.cfg.inject_nan_step = f.inject_nan;
  CKPT_ASSIGN_OR_RETURN(j.work, workload::TrainWorkload::Create(f.cfg, model, j.layout, coords));
  CKPT_ASSIGN_OR_RETURN(j.coll, workload::MpiCollectives::Create(*j.comm, j.layout));
  f.save.json = f.json;  // --json: the summary, and each save's progress as JSON lines
  CKPT_ASSIGN_OR_RETURN(j.saver, TrainSaver::Create(f.save, *j.session, *j.comm, f.root));
  CKPT_ASSIGN_OR_RETURN(SaveOptions base, SaveTemplate(j, f));
  CKPT_RETURN_IF_ERROR(j.saver->Prepare(std::move(base), {!f.no_rng, !f.no_iterator}, *j.work));
  return j;
}

// With a local tier: the newest complete tier's iteration, said with why (ChooseResumeTier).
Result<json> ResumeTiered(Job& j, const TrainFlags& f) {
  const workload::RestoreTimer timer;  // restore time: from the choice to the state applied
  const workload::ResumeParts parts{!f.no_rng, !f.no_iterator};
  CKPT_ASSIGN_OR_RETURN(TierChoice c, ChooseResumeTier(*j.saver->local(), f.root));
  json phases = {{"choose", timer.Since()}, {"mpi_up", j.mpi_up}};
  Print0(j, "train: resume from the " + c.tier + " tier, iteration " + std::to_string(c.iteration) + ": " + c.why + "\n");
  json out = {{"tier", c.tier}, {"iteration", c.iteration}, {"why", c.why}, {"local_iteration", c.local_iteration},
              {"global_iteration", c.global_iteration}};
  if (c.tier == "local") {
    ShardedStateDict request = j.work->SaveDict(parts);
    CKPT_ASSIGN_OR_RETURN(LocalRestoreStats rs, LocalRestore(request, c.iteration, *j.saver->local()));
    const double restored = timer.Since();
    CKPT_RETURN_IF_ERROR(j.work->ApplyLoaded(request, c.iteration, j.comm.get(), parts, Millis(f.timeout_ms)));
    out.update({{"bytes", rs.load.bytes_read}, {"fetched_bytes", rs.fetched_bytes}, {"from_rank", rs.from_rank}});
    phases.update({{"fetch", rs.fetch_seconds},
                   {"load", rs.load_seconds},
                   {"keep", rs.keep_seconds},
                   {"apply", timer.Since() - restored}});
    phases = workload::WithLoadPhases(phases, rs.load);
  } else {
    LoadStats ls;
    CKPT_RETURN_IF_ERROR(j.work->Resume(f.root, c.iteration, j.comm.get(), parts, Millis(f.timeout_ms), &ls));
    out["bytes"] = ls.bytes_read;
    phases = workload::WithLoadPhases(phases, ls);
    phases["load"] = ls.seconds;  // the rest of the resume: manifest, resume checks, apply
  }
  const json report = timer.Report(phases, out.value("fetched_bytes", int64_t(0)));  // the job's: its slowest rank's
  CKPT_ASSIGN_OR_RETURN(auto all, workload::AllGatherJson(*j.comm, report, Millis(f.timeout_ms), Phase::kResumeTime));
  CKPT_ASSIGN_OR_RETURN(json job, workload::ReduceRestoreReports(all));
  out.update(job);
  return out;
}

// Resumes from the latest checkpoint (all ranks agree) or starts fresh; a
// fresh run refuses a root that already holds iterations (its saves would not
// be 'latest') at start-up, not after every step ran, unless --allow-older.
Result<json> ResumeOrInit(Job& j, const TrainFlags& f) {
  if (!f.resume) {
    auto iters = ListIterations(DefaultEnv(), f.root);
    if (!f.allow_older && iters.ok() && !iters->empty())
      return Status::FailedPrecondition("root '" + f.root + "' already holds iteration " +
                                        std::to_string(iters->back()) +
                                        " (an earlier run?): this run's saves would not be 'latest'; use --resume, "
                                        "a fresh root, or --allow-older");
    j.work->Initialize();
    return json(nullptr);
  }
  if (j.saver->local()) return ResumeTiered(j, f);
  LoadStats ls;
  CKPT_RETURN_IF_ERROR(
      j.work->Resume(f.root, -1, j.comm.get(), {!f.no_rng, !f.no_iterator}, Millis(f.timeout_ms), &ls));
  return json{{"iteration", ls.iteration}, {"seconds", ls.seconds}, {"bytes", ls.bytes_read}};
}

}  // namespace

Status RunTrain(TrainFlags& f) {
  auto started = StartJob(f);
  if (!started.ok()) return Fail(Job(), started.status());
  Job& j = *started;
  workload::TrainLoopOptions lo{.steps = f.steps, .save_every = f.save_every, .stop_after_first_save = f.kill_after_save,
                                .log_interval = f.log_interval};
  auto save_at = workload::ParseSaveAt(f.save_at);
  if (!save_at.ok()) return Fail(j, save_at.status());
  lo.save_at = *save_at;
  if (j.saver->local()) {  // the loop asks at local and global iterations; the saver tells them apart
    const std::set<int64_t> global_at = lo.save_at;
    j.saver->SetGlobalDue([global_at, steps = f.steps, every = f.save_every](int64_t it) {
      return it == steps || global_at.count(it) || (every > 0 && it % every == 0);
    });
    for (int64_t it = f.save.local_every; f.save.local_every > 0 && it <= f.steps; it += f.save.local_every)
      lo.save_at.insert(it);
  }
  auto sig = f.exit_signal ? workload::StopLoopOnSignal(SIGTERM, *j.comm, Millis(f.timeout_ms), &lo)
                           : Result<std::unique_ptr<workload::ExitSignal>>(nullptr);
  if (!sig.ok()) return Fail(j, sig.status());
  auto resumed = TermDeferred([&] { return ResumeOrInit(j, f); });  // SIGTERM waits for a load (launcher_term.h)
  if (!resumed.ok()) return Fail(j, resumed.status(), /*agreed=*/true);
  auto run = workload::RunTrainLoop(*j.work, *j.coll, *j.saver, lo, [&](const std::string& s) { Print0(j, s); });
  if (!run.ok()) return Fail(j, run.status());
  if (run->stopped_early) {  // --kill-after-save: every rank is past the commit; die like a killed job
    CKPT_RETURN_IF_ERROR(j.comm->Barrier(Millis(f.timeout_ms), Phase::kKill));
    Print0(j, "train: killing the job after the save at iteration " + std::to_string(j.work->iteration()) +
                  " (SIGKILL)\n");
    std::raise(SIGKILL);
  }
  auto report = j.saver->Report(j.work->SaveDict({!f.no_rng, !f.no_iterator}), Millis(f.timeout_ms));
  if (!report.ok()) return Fail(j, report.status());
  json out = workload::TrainSummary(*j.work, *run);
  out.update({{"mode", f.mode}, {"layout", j.layout.ToString()}, {"model", f.model}, {"resumed", *resumed},
              {"saves", (*report)["saves"]}});
  for (const char* k : {"memcpy_baseline", "async"})
    if (report->contains(k)) out[k] = (*report)[k];
  Print0(j, f.json ? out.dump() + "\n" : workload::TrainSummaryLine(out));
  return Status::Ok();
}

}  // namespace ckpt::cli
