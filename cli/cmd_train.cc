// ckpt train: the deterministic training workload (ckpt/workload/) as a real
// multi-rank job under mpirun. Loop, schedule and summary are library code
// (ckpt/workload/train_loop.h); this file parses the options, starts the job
// (MPI, layout, model, workload, saver: cli/train_saver.h) and prints. Hidden
// developer switches (negative controls, a kill after a save, a NaN fault):
// AddDeveloperSwitches; saving options (async, faults, hash, retention):
// cli/train_options.cc; --exit-signal-handler: ckpt/workload/exit_signal.h.
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "ckpt/mpi/comm_mpi.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/workload/exit_signal.h"
#include "ckpt/workload/job_setup.h"
#include "ckpt/workload/train_loop.h"
#include "ckpt/workload/train_workload.h"
#include "cli/commands.h"
#include "cli/train_options.h"
#include "reshard/gpt_config_json.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;

struct TrainFlags {
  std::string layout = "tp=1", model = "tiny", root, mode = "elementwise", save_at, nonfinite = "refuse";
  std::string compression = "none";
  int64_t steps = 10, save_every = 0, inject_nan = -1, timeout_ms = 60000, log_interval = 0;
  workload::TrainConfig cfg;
  TrainSaveFlags save;
  bool resume = false, no_rng = false, no_iterator = false, kill_after_save = false, json = false,
       allow_older = false, exit_signal = false;
};

struct Job {
  std::unique_ptr<MpiSession> session;
  std::unique_ptr<MpiComm> comm;
  ParallelConfig layout;
  std::unique_ptr<workload::TrainWorkload> work;
  std::unique_ptr<workload::MpiCollectives> coll;
  std::unique_ptr<TrainSaver> saver;
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
int Fail(const Job& j, const Status& st, bool agreed = false) {
  if (j.rank() < 0) {
    const char* launcher_rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (!launcher_rank || std::string(launcher_rank) == "0")
      std::fprintf(stderr, "ckpt train: %s\n", st.ToString().c_str());
  } else if (agreed ? j.rank() == 0 : (st.code() != Code::kAborted || j.rank() == 0)) {
    std::fprintf(stderr, "ckpt train: rank %d: %s\n", j.rank(), st.ToString().c_str());
  }
  return ExitCodeOf(st);  // typed: a refused NaN/Inf save carries kNonFinitePhase on every rank
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
  o.metadata = {{"model", f.model}, {"gpt", f.cfg.model}, {"train", j.work->config().ArgsJson()}};
  return o;
}

Result<Job> StartJob(TrainFlags& f) {
  Job j;
  CKPT_ASSIGN_OR_RETURN(j.session, MpiSession::Init(nullptr, nullptr));
  CKPT_ASSIGN_OR_RETURN(j.comm, MpiComm::Create());
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
  CKPT_ASSIGN_OR_RETURN(j.saver, TrainSaver::Create(f.save, *j.session, *j.comm, f.root));
  CKPT_ASSIGN_OR_RETURN(SaveOptions base, SaveTemplate(j, f));
  CKPT_RETURN_IF_ERROR(j.saver->Prepare(std::move(base), {!f.no_rng, !f.no_iterator}, *j.work));
  return j;
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
  LoadStats ls;
  CKPT_RETURN_IF_ERROR(
      j.work->Resume(f.root, -1, j.comm.get(), {!f.no_rng, !f.no_iterator}, Millis(f.timeout_ms), &ls));
  return json{{"iteration", ls.iteration}, {"seconds", ls.seconds}, {"bytes", ls.bytes_read}};
}

int Run(TrainFlags& f) {
  auto started = StartJob(f);
  if (!started.ok()) return Fail(Job(), started.status());
  Job& j = *started;
  workload::TrainLoopOptions lo{.steps = f.steps, .save_every = f.save_every, .stop_after_first_save = f.kill_after_save,
                                .log_interval = f.log_interval};
  auto save_at = workload::ParseSaveAt(f.save_at);
  if (!save_at.ok()) return Fail(j, save_at.status());
  lo.save_at = *save_at;
  auto sig = f.exit_signal ? workload::StopLoopOnSignal(SIGTERM, *j.comm, Millis(f.timeout_ms), &lo)
                           : Result<std::unique_ptr<workload::ExitSignal>>(nullptr);
  if (!sig.ok()) return Fail(j, sig.status());
  auto resumed = ResumeOrInit(j, f);
  if (!resumed.ok()) return Fail(j, resumed.status(), /*agreed=*/true);
  auto run = workload::RunTrainLoop(*j.work, *j.coll, *j.saver, lo, [&](const std::string& s) { Print0(j, s); });
  if (!run.ok()) return Fail(j, run.status());
  if (run->stopped_early) {  // --kill-after-save: every rank is past the commit; die like a killed job
    if (!j.comm->Barrier(Millis(f.timeout_ms), "kill").ok()) return kExitError;
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
  return kExitOk;
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

void RegisterTrain(CLI::App& app, int* exit_code) {
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
  cmd->add_option("--timeout-ms", f->timeout_ms, "deadline of every checkpoint collective (> 0)")->check(CLI::PositiveNumber);
  AddTrainSaveOptions(cmd, &f->save);
  cmd->add_flag("--exit-signal-handler", f->exit_signal,
                "on SIGTERM (to any rank) save the current iteration, then exit 0 (Megatron-LM's flag)");
  cmd->add_option("--log-interval", f->log_interval, "print 'train: iteration N' every K iterations");
  cmd->add_flag("--json", f->json, "print the summary as JSON");
  AddDeveloperSwitches(cmd, f.get());
  cmd->callback([=]() { *exit_code = Run(*f); });
}

}  // namespace ckpt::cli
