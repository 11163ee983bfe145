// ckpt train: the deterministic training workload (ckpt/workload/) as a real
// multi-rank job under mpirun - train to --steps iterations, save on a
// schedule, resume from the latest checkpoint under any layout, and the
// switches the reproducibility tests need (negative controls, a simulated
// kill after a save, a NaN fault and the save-time non-finite guard), and
// asynchronous saves (--async-save, cli/train_saver.h) with their negative
// control (--async-no-snapshot), a test hook (--async-delay-ms) and fault
// plans for the saves (--faults).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/mpi/comm_mpi.h"
#include "ckpt/workload/train_workload.h"
#include "cli/commands.h"
#include "cli/gpt_job.h"
#include "cli/train_saver.h"
#include "reshard/gpt_config_json.h"

namespace ckpt::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct TrainFlags {
  std::string layout = "tp=1", model = "tiny", root, mode = "elementwise", save_at, nonfinite = "refuse";
  std::string compression = "none";
  int64_t steps = 10, save_every = 0, inject_nan = -1, timeout_ms = 60000;
  workload::TrainConfig cfg;
  TrainSaveFlags save;
  bool resume = false, no_rng = false, no_iterator = false, kill_after_save = false, json = false,
       allow_older = false;
};

double Secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

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
  return st.message().find("non-finite") != std::string::npos ? kExitCheckFailed : kExitError;
}

Result<Job> StartJob(TrainFlags& f) {
  Job j;
  CKPT_ASSIGN_OR_RETURN(j.session, MpiSession::Init(nullptr, nullptr));
  CKPT_ASSIGN_OR_RETURN(j.comm, MpiComm::Create());
  CKPT_ASSIGN_OR_RETURN(j.layout, ParallelConfig::Parse(f.layout));
  if (j.layout.world_size() != j.comm->size())
    return Status::InvalidArgument("layout " + j.layout.ToString() + " needs mpirun -np " +
                                   std::to_string(j.layout.world_size()) + ", the job has " +
                                   std::to_string(j.comm->size()) + " ranks");
  CKPT_ASSIGN_OR_RETURN(RankCoords coords, CoordsOf(j.layout, j.comm->rank()));
  std::string preset;
  CKPT_ASSIGN_OR_RETURN(reshard::GptConfig model, ResolveModel(f.model, f.root, -1, &preset));
  CKPT_ASSIGN_OR_RETURN(f.cfg.mode, workload::ParseTrainMode(f.mode));
  f.cfg.model_name = f.model;
  f.cfg.model = reshard::GptConfigToJson(model);
  f.cfg.inject_nan_step = f.inject_nan;
  CKPT_ASSIGN_OR_RETURN(j.work, workload::TrainWorkload::Create(f.cfg, model, j.layout, coords));
  CKPT_ASSIGN_OR_RETURN(j.coll, workload::MpiCollectives::Create(*j.comm, j.layout));
  CKPT_ASSIGN_OR_RETURN(j.saver, TrainSaver::Create(f.save, *j.session, *j.comm, f.root));
  return j;
}

Result<NonFinitePolicy> ParsePolicy(const std::string& s) {
  if (s == "refuse") return NonFinitePolicy::kRefuse;
  if (s == "warn") return NonFinitePolicy::kWarn;
  if (s == "allow") return NonFinitePolicy::kAllow;
  return Status::InvalidArgument("--nonfinite must be refuse, warn or allow, not '" + s + "'");
}

Result<std::set<int64_t>> ParseSaveAt(const std::string& s) {
  std::set<int64_t> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      out.insert(std::stoll(item));
    } catch (const std::exception&) {
      return Status::InvalidArgument("--save-at: '" + item + "' is not an iteration");
    }
  }
  return out;
}

// Saves (or, async, starts saving) the current iteration; returns the log line.
Result<std::string> Save(Job& j, const TrainFlags& f, const workload::ResumeParts& parts) {
  CKPT_ASSIGN_OR_RETURN(NonFinitePolicy policy, ParsePolicy(f.nonfinite));
  CKPT_ASSIGN_OR_RETURN(Compression comp, ParseCompression(f.compression));
  SaveOptions o;
  o.root = f.root;
  o.iteration = j.work->iteration();
  o.comm = j.comm.get();
  o.timeout = Millis(f.timeout_ms);
  o.nonfinite = policy;
  o.allow_older = f.allow_older;
  o.write.codec.compression = comp;
  o.layout = reshard::LayoutToJson(j.layout);
  o.metadata = {{"model", f.model}, {"gpt", f.cfg.model}, {"train", j.work->config().ArgsJson()}};
  return j.saver->Save(j.work->SaveDict(parts), std::move(o), j.work->iteration());
}

int Run(TrainFlags& f) {
  auto started = StartJob(f);
  Job tmp;
  if (!started.ok()) return Fail(tmp, started.status());
  Job& j = *started;
  const workload::ResumeParts parts{!f.no_rng, !f.no_iterator};
  auto save_at = ParseSaveAt(f.save_at);
  if (!save_at.ok()) return Fail(j, save_at.status());
  json resumed = nullptr;
  if (!f.resume && !f.allow_older) {  // check the root now, not after every step ran
    auto iters = ListIterations(DefaultEnv(), f.root);
    if (iters.ok() && !iters->empty())
      return Fail(j, Status::FailedPrecondition(
                         "root '" + f.root + "' already holds iteration " + std::to_string(iters->back()) +
                         " (an earlier run?): this run's saves would not be 'latest'; use --resume, a fresh "
                         "root, or --allow-older"), /*agreed=*/true);
  }
  if (f.resume) {
    LoadStats ls;
    Status st = j.work->Resume(f.root, -1, j.comm.get(), parts, Millis(f.timeout_ms), &ls);
    if (!st.ok()) return Fail(j, st, /*agreed=*/true);
    resumed = {{"iteration", ls.iteration}, {"seconds", ls.seconds}, {"bytes", ls.bytes_read}};
  } else {
    j.work->Initialize();
  }
  const int64_t first = j.work->iteration();
  double step_secs = 0;
  while (j.work->iteration() < f.steps) {
    const auto t0 = Clock::now();
    Status st = j.work->Step(*j.coll);
    step_secs += Secs(t0);
    if (!st.ok()) return Fail(j, st);
    j.saver->OnStep();
    const int64_t it = j.work->iteration();
    const bool due = it == f.steps || save_at->count(it) || (f.save_every > 0 && it % f.save_every == 0);
    if (!due) continue;
    auto saved = Save(j, f, parts);
    if (!saved.ok()) return Fail(j, saved.status());
    Print0(j, *saved);
    if (f.kill_after_save) {
      auto joined = j.saver->Finish(it);  // an async save must commit before the kill
      if (!joined.ok()) return Fail(j, joined.status());
      Print0(j, *joined);
      // Every rank is past the commit; then die like a job killed by the scheduler.
      if (!j.comm->Barrier(Millis(f.timeout_ms), "kill").ok()) return kExitError;
      Print0(j, "train: killing the job after the save at iteration " + std::to_string(it) + " (SIGKILL)\n");
      std::raise(SIGKILL);
    }
  }
  auto joined = j.saver->Finish(j.work->iteration());  // never exit with a save in flight
  if (!joined.ok()) return Fail(j, joined.status());
  Print0(j, *joined);
  auto report = j.saver->Report(j.work->SaveDict(parts), Millis(f.timeout_ms));
  if (!report.ok()) return Fail(j, report.status());
  const workload::TrainWorkload& w = *j.work;
  const int64_t consumed = w.consumed_samples();
  const bool exactly_once = w.ledger() == workload::SampleLedger::Range(0, consumed);
  const bool in_step = consumed == w.iteration() * f.cfg.global_batch;
  json out = {{"op", "train"}, {"mode", f.mode}, {"layout", j.layout.ToString()}, {"model", f.model},
              {"start_iteration", first}, {"iteration", w.iteration()}, {"resumed", resumed},
              {"consumed_samples", consumed}, {"samples_exactly_once", exactly_once},
              {"consumed_matches_iterations", in_step}, {"rng_offset", w.rng().offset}, {"lr", w.lr().Lr()},
              {"step_seconds_mean", w.iteration() > first ? step_secs / double(w.iteration() - first) : 0.0},
              {"saves", (*report)["saves"]}};
  for (const char* k : {"memcpy_baseline", "async"})
    if (report->contains(k)) out[k] = (*report)[k];
  if (f.json) {
    Print0(j, out.dump() + "\n");
  } else {
    char line[512];
    std::snprintf(line, sizeof line,
                  "train: %s %s iterations %lld -> %lld; samples consumed %lld (each of [0, %lld) exactly once: %s; "
                  "= iterations x global batch: %s); %.1f ms/step\n",
                  f.mode.c_str(), j.layout.ToString().c_str(), static_cast<long long>(first),
                  static_cast<long long>(w.iteration()), static_cast<long long>(consumed),
                  static_cast<long long>(consumed), exactly_once ? "yes" : "NO", in_step ? "yes" : "NO",
                  1e3 * out["step_seconds_mean"].get<double>());
    Print0(j, line);
  }
  return kExitOk;
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
  cmd->add_option("--seed", f->cfg.seed, "seed of initial weights, data and RNG");
  cmd->add_option("--global-batch", f->cfg.global_batch, "samples per iteration");
  cmd->add_option("--micro-batch", f->cfg.micro_batch, "samples per micro batch per DP rank");
  cmd->add_option("--lr", f->cfg.lr.max_lr, "peak learning rate");
  cmd->add_option("--min-lr", f->cfg.lr.min_lr, "final learning rate");
  cmd->add_option("--lr-warmup", f->cfg.lr.warmup_steps, "warmup iterations");
  cmd->add_option("--lr-decay", f->cfg.lr.decay_steps, "iteration where the decay reaches min-lr");
  cmd->add_option("--lr-style", f->cfg.lr.style, "constant, linear or cosine");
  cmd->add_option("--save-every", f->save_every, "save every K iterations (and always at --steps)");
  cmd->add_option("--save-at", f->save_at, "save at these iterations, comma-separated (and always at --steps)");
  cmd->add_flag("--resume", f->resume, "resume from the latest checkpoint under --root (strict)");
  cmd->add_flag("--allow-older", f->allow_older,
                "start a new run in a root holding newer iterations (refused by default: 'latest' would pick them)");
  cmd->add_flag("--no-rng-state", f->no_rng, "negative control: neither save nor load the RNG state");
  cmd->add_flag("--no-iterator-state", f->no_iterator, "negative control: neither save nor load the data iterator state");
  cmd->add_flag("--kill-after-save", f->kill_after_save, "SIGKILL every rank right after the first save commits");
  cmd->add_option("--inject-nan", f->inject_nan, "fault: a NaN gradient at this iteration (tensor decoder.layers.0.mlp.linear_fc2.weight, element 100)");
  cmd->add_option("--nonfinite", f->nonfinite, "NaN/Inf at save: refuse (default), warn or allow");
  cmd->add_option("--compress", f->compression, "none or zstd");
  cmd->add_option("--timeout-ms", f->timeout_ms, "deadline of every checkpoint collective (> 0)")->check(CLI::PositiveNumber);
  cmd->add_flag("--async-save", f->save.async,
                "save in the background (AsyncSaver on its own communicator; needs MPI_THREAD_MULTIPLE): "
                "training blocks only for the snapshot copy");
  cmd->add_flag("--async-no-snapshot", f->save.no_snapshot,
                "NEGATIVE CONTROL (never for real saves): the background save reads the live training buffers");
  cmd->add_option("--async-delay-ms", f->save.delay_ms,
                  "TEST HOOK: the background save sleeps this long before it reads or writes anything");
  cmd->add_option("--snapshot-memory", f->save.snapshot_memory,
                  "with --async-save: host (default) or pinned (cudaHostAlloc; the GPU path)");
  cmd->add_option("--faults", f->save.faults,
                  "fault plan for the saves (faults/fault_spec.h; one FaultEnv for the job: nth counts over saves)");
  cmd->add_option("--faults-log", f->save.faults_log, "append one JSON line per fired fault to this file");
  cmd->add_flag("--json", f->json, "print the summary as JSON");
  cmd->callback([=]() { *exit_code = Run(*f); });
}

}  // namespace ckpt::cli
