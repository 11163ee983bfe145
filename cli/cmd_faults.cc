// ckpt faults: fault injection across multi-rank jobs.
//
//   ckpt faults child --phase save|load ...   one rank of a faulted job (under mpirun)
//   ckpt faults run ...                       the campaign: trace, replay every fault, recover, check
//   ckpt faults deadline ...                  hung / killed ranks: detection latency, nothing committed
//   ckpt faults powerloss --dir D --mode M    apply a recorded power cut to the disk
//   ckpt faults damage --root R --file F ...  after-commit damage (bit flip, truncate, delete)
//
// The child is the only part that needs a GPT job (cli/gpt_job.h); everything
// else is the faults/ library.
#include <cstdio>
#include <cstdlib>
#include <unistd.h>

#include "ckpt/protocol/checkpoint.h"
#include "cli/commands.h"
#include "cli/gpt_job.h"
#include "faults/campaign.h"
#include "faults/damage.h"
#include "faults/deadline.h"
#include "faults/fault_env.h"
#include "faults/jobs.h"
#include "faults/oracle.h"
#include "faults/power_loss.h"
#include "faults/power_loss_env.h"
#include "reshard/gpt_config_json.h"
#include "ckpt/workload/gpt_local_state.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;
using namespace ckpt::faults;

struct ChildFlags {
  std::string phase, root, layout = "tp=1", model = "tiny", spec, spec_file, trace_dir, power_dir, result_dir, cases;
  int64_t iteration = -1, timeout_ms = 60000, chunk_kb = 16;
  bool fallback = false, no_hash_check = false;
};

// Writes `text` to `path` directly (evidence for the runner, outside any Env under test).
void WriteEvidence(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  WriteStringToFileSync(DefaultEnv(), path, text).IgnoreError();
}

std::string RankFile(const std::string& dir, const char* stem, int rank, const char* ext) {
  return dir.empty() ? "" : JoinPath(dir, std::string(stem) + std::to_string(rank) + ext);
}

Result<FaultPlan> PlanOf(const ChildFlags& f) {
  FaultPlan plan;
  if (!f.spec_file.empty()) {
    CKPT_ASSIGN_OR_RETURN(plan, LoadFaultPlanFile(DefaultEnv(), f.spec_file));
  }
  CKPT_ASSIGN_OR_RETURN(FaultPlan more, ParseFaultPlan(f.spec));
  for (auto& r : more.rules) plan.rules.push_back(std::move(r));
  plan.disable_sync = plan.disable_sync || more.disable_sync;
  return plan;
}

// A failed rank: report, then end without MPI_Finalize, which can block on a
// dead peer. exit_code < 0: by the Status (kCorruption: check failed).
[[noreturn]] void DieChild(const char* phase, int rank, const Status& st, const std::string& result_path,
                           json result, int exit_code = -1) {
  std::fprintf(stderr, "ckpt faults child %s: rank %d: %s\n", phase, rank, st.ToString().c_str());
  result["ok"] = false;
  result["error"] = st.ToString();
  result["t_end_ns"] = MonotonicNs();
  WriteEvidence(result_path, result.dump() + "\n");
  std::fflush(stdout);
  std::fflush(stderr);
  if (exit_code < 0) exit_code = st.code() == Code::kCorruption ? kExitCheckFailed : kExitError;
  _exit(exit_code);
}

// One save of the job's state under `root` with `plan`. Writes the rank's
// evidence into `result_dir` (outcome, fired faults, commit ack) and returns
// the save's status.
Status SaveCase(GptJob& j, const reshard::GptConfig& model, const std::string& name, const ChildFlags& f,
                const std::string& root, const std::string& result_dir, const FaultPlan& plan, Comm* comm) {
  const int rank = j.rank();
  json result = {{"rank", rank}, {"phase", "save"}, {"iteration", f.iteration}};
  Env* env = DefaultEnv();
  std::unique_ptr<PowerLossEnv> power;
  if (!f.power_dir.empty()) {
    CKPT_ASSIGN_OR_RETURN(power, PowerLossEnv::Create(env, {JournalPath(f.power_dir, rank), CutMarkerPath(f.power_dir), rank}));
    env = power.get();
  }
  FaultEnv::Options fo;
  fo.rank = rank;
  fo.plan = plan;
  fo.root = root;
  fo.iteration = f.iteration;
  if (power) fo.before_crash = [p = power.get()] { p->Cut(); };
  fo.event_log = result_dir.empty() ? "" : JoinPath(result_dir, "events.jsonl");
  fo.record_trace = !f.trace_dir.empty();
  FaultEnv fenv(env, fo);

  SaveOptions o;
  o.root = root;
  o.iteration = f.iteration;
  o.env = &fenv;
  o.comm = comm;
  o.timeout = Millis(f.timeout_ms);
  o.write.chunk_bytes = f.chunk_kb * 1024;
  o.layout = reshard::LayoutToJson(j.layout);
  o.metadata = {{"model", name}, {"gpt", reshard::GptConfigToJson(model)}};
  // The commit is acknowledged once any rank reaches the "commit" step: from
  // then on the application may rely on it, so recovery must find it.
  const std::string ack = RankFile(result_dir, "ack_rank_", rank, "");
  o.hook = fenv.Hook([&](std::string_view step, int) {
    if (step == "commit") WriteEvidence(ack, std::to_string(MonotonicNs()) + "\n");
    return Status::Ok();
  });
  CKPT_ASSIGN_OR_RETURN(ShardedStateDict sd, j.StateDict());
  result["t_start_ns"] = MonotonicNs();
  auto r = SaveCheckpoint(sd, o);
  result["t_end_ns"] = MonotonicNs();
  result["ok"] = r.ok();
  if (!r.ok()) result["error"] = r.status().ToString();
  if (r.ok() && !r->warning.ok()) result["warning"] = r->warning.ToString();
  if (r.ok() && !r->warning.ok())
    std::fprintf(stderr, "ckpt faults child save: rank %d: committed iteration %lld, but %s\n", rank,
                 static_cast<long long>(f.iteration), r->warning.message().c_str());
  if (!f.trace_dir.empty())
    WriteEvidence(RankFile(f.trace_dir, "rank_", rank, ".jsonl"), TraceToJsonLines(fenv.Trace()));
  WriteEvidence(RankFile(result_dir, "rank_", rank, ".json"), result.dump() + "\n");
  return r.status();
}

// Batch mode: one case per line of `cases` ({"root","result_dir","spec"}),
// each with a fresh communicator so a failed case cannot skew the next one's
// message tags. Only for faults no process dies or hangs of.
int SaveCases(GptJob& j, const reshard::GptConfig& model, const std::string& name, const ChildFlags& f,
              const FaultPlan& base) {
  auto text = ReadFileToString(DefaultEnv(), f.cases);
  if (!text.ok()) DieChild("save", j.rank(), text.status(), "", json::object());
  const Millis resync(std::max<int64_t>(60000, 4 * f.timeout_ms));
  size_t pos = 0;
  for (int n = 0; pos < text->size(); ++n) {
    size_t nl = text->find('\n', pos);
    if (nl == std::string::npos) nl = text->size();
    json c = json::parse(text->substr(pos, nl - pos), nullptr, false);
    pos = nl + 1;
    if (!c.is_object()) continue;
    auto plan = ParseFaultPlan(c.value("spec", ""));
    auto comm = plan.ok() ? MpiComm::Create() : Result<std::unique_ptr<MpiComm>>(plan.status());
    if (!comm.ok()) DieChild("save", j.rank(), comm.status(), "", json::object());
    FaultPlan p = base;
    p.rules.insert(p.rules.end(), plan->rules.begin(), plan->rules.end());
    p.disable_sync = p.disable_sync || plan->disable_sync;
    Status st = SaveCase(j, model, name, f, c.value("root", ""), c.value("result_dir", ""), p, comm->get());
    if (!st.ok()) std::fprintf(stderr, "ckpt faults child save: case %d: rank %d: %s\n", n, j.rank(), st.ToString().c_str());
    st = j.comm->Barrier(resync, "case");
    if (!st.ok()) DieChild("save", j.rank(), st, "", json::object());
  }
  return kExitOk;
}

int ChildSave(const ChildFlags& f) {
  std::string name;
  auto model = ResolveModel(f.model, f.root, -1, &name);
  auto plan = model.ok() ? PlanOf(f) : Result<FaultPlan>(model.status());
  if (!plan.ok()) DieChild("save", -1, plan.status(), "", json::object());
  auto job = StartGptJob(f.layout, *model, name, false);
  if (!job.ok()) DieChild("save", -1, job.status(), "", json::object());
  GptJob& j = **job;
  Status st = FillForIteration(*j.state, model->vocab_size, f.iteration);
  if (st.ok()) st = j.comm->Barrier(Millis(f.timeout_ms), "start");
  if (!st.ok()) DieChild("save", j.rank(), st, "", json::object());
  if (!f.cases.empty()) return SaveCases(j, *model, name, f, *plan);
  st = SaveCase(j, *model, name, f, f.root, f.result_dir, *plan, j.comm.get());
  if (!st.ok()) DieChild("save", j.rank(), st, "", json::object());
  Print0(j, "%s\n", json{{"ok", true}, {"iteration", f.iteration}}.dump().c_str());
  return kExitOk;
}

// The state a load fills: a GPT job under mpirun, or (world 1 outside mpirun)
// a local state without MPI, which starts much faster.
struct LoadRank {
  std::unique_ptr<GptJob> job;
  std::unique_ptr<workload::GptLocalState> local;
  workload::GptLocalState* state = nullptr;
  Comm* comm = nullptr;
  int rank = 0;
};

Result<LoadRank> StartLoadRank(const std::string& layout, const reshard::GptConfig& model, const std::string& name) {
  LoadRank lr;
  if (WorldOf(layout) == 1 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) {
    CKPT_ASSIGN_OR_RETURN(lr.local, LocalGptState(model, layout));
    lr.state = lr.local.get();
    return lr;
  }
  CKPT_ASSIGN_OR_RETURN(lr.job, StartGptJob(layout, model, name, false));
  lr.state = lr.job->state.get();
  lr.comm = lr.job->comm.get();
  lr.rank = lr.job->rank();
  return lr;
}

int ChildLoad(const ChildFlags& f) {
  std::string name;
  auto model = ResolveModel(f.model, f.root, -1, &name);
  auto plan = model.ok() ? PlanOf(f) : Result<FaultPlan>(model.status());
  if (!plan.ok()) DieChild("load", -1, plan.status(), "", json::object());
  auto lr = StartLoadRank(f.layout, *model, name);
  if (!lr.ok()) DieChild("load", -1, lr.status(), "", json::object());
  const int rank = lr->rank;
  const std::string result_path = RankFile(f.result_dir, "rank_", rank, ".json");
  json result = {{"rank", rank}, {"phase", "load"}};
  FaultEnv::Options fo;
  fo.rank = rank;
  fo.plan = *plan;
  fo.event_log = f.result_dir.empty() ? "" : JoinPath(f.result_dir, "events.jsonl");
  FaultEnv fenv(DefaultEnv(), fo);
  LoadOptions o;
  o.root = f.root;
  o.iteration = ResolveLoadIteration(f.root, f.iteration);
  o.env = &fenv;
  o.comm = lr->comm;
  o.timeout = Millis(f.timeout_ms);
  o.fallback = f.fallback;
  o.verify_hashes = !f.no_hash_check;
  ShardedStateDict sd = lr->state->StateDict();
  if (lr->comm) {
    Status st = lr->comm->Barrier(o.timeout, "start");
    if (!st.ok()) DieChild("load", rank, st, result_path, result);
  }
  result["t_start_ns"] = MonotonicNs();
  auto r = LoadCheckpoint(sd, o);
  if (!r.ok())
    DieChild("load", rank, r.status(), result_path, result, AgreedLoadExitCode(lr->comm, r.status(), o.timeout));
  json mine = LoadVerdict(r, *lr->state, model->vocab_size);
  result.update(mine);
  result["t_end_ns"] = MonotonicNs();
  WriteEvidence(result_path, result.dump() + "\n");
  json merged = mine;
  if (lr->comm) {
    auto all = lr->comm->AllGather(mine.dump(), o.timeout, "report");
    if (!all.ok()) DieChild("load", rank, all.status(), "", result);
    std::vector<json> parsed;
    for (const auto& s : *all) parsed.push_back(json::parse(s));
    merged = MergeLoadVerdicts(parsed);
  }
  if (rank == 0) std::printf("%s\n", merged.dump().c_str());
  std::fflush(stdout);
  if (!merged.value("ok", false)) return kExitError;
  return merged.value("mismatches", int64_t(0)) == 0 ? kExitOk : kExitCheckFailed;
}

void RegisterChild(CLI::App* faults, int* exit_code) {
  auto* cmd = faults->add_subcommand("child", "One rank of a faulted save or load job (run under mpirun)");
  auto f = std::make_shared<ChildFlags>();
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
  cmd->add_option("--timeout-ms", f->timeout_ms, "deadline of every collective");
  cmd->add_option("--chunk-kb", f->chunk_kb, "save: target chunk size in KiB");
  cmd->add_option("--cases", f->cases, "save: run many fault cases in this job (JSON lines: root, result_dir, spec)");
  cmd->add_flag("--fallback", f->fallback, "load: fall back to the newest checkpoint that verifies");
  cmd->add_flag("--no-hash-check", f->no_hash_check, "load: skip chunk hashes (shows the value check alone)");
  cmd->callback([=]() { *exit_code = f->phase == "save" ? ChildSave(*f) : ChildLoad(*f); });
}

// MCA choices that make the campaign's jobs faster here: 8 oversubscribed
// ranks start ~35% faster (0.69 s -> 0.43 s, ckpt needs only point-to-point
// MPI), and an aborted job is torn down at once instead of mpirun waiting
// odls_base_sigkill_timeout (1 s) between SIGTERM and SIGKILL.
constexpr const char* kFastMpi =
    "--mca pml ob1 --mca coll basic,self,libnbc --mca osc ^rdma,ucx --mca io ^ompio --mca odls_base_sigkill_timeout 0";

struct RunFlags {
  std::string work, layout = "tp=2,pp=2,dp=2", model = "tiny", recover = "tp=1", variants, modes = "drop,prefix,torn";
  std::string boundaries = "smart", points, ranks, mpirun, mpi_extra = kFastMpi, json_out, scenarios, child_ckpt;
  int64_t timeout_ms = 2000, chunk_kb = 16, seed = 1;
  std::string expect;  // negative control: outcomes that must occur
  bool no_fsync = false, no_hash_check = false, keep = false, quiet = false;
};

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  for (auto& w : SplitWords([&] { std::string t = s; for (char& c : t) c = c == ',' ? ' ' : c; return t; }())) out.push_back(w);
  return out;
}

JobEnv JobOf(const RunFlags& f) {
  JobEnv j;
  j.ckpt = f.child_ckpt.empty() ? SelfExe() : f.child_ckpt;
  j.mpirun = f.mpirun.empty() ? DefaultMpirun() : SplitWords(f.mpirun);
  j.model = f.model;
  j.layout = f.layout;
  j.timeout_ms = f.timeout_ms;
  j.chunk_kb = f.chunk_kb;
  j.verify_hashes = !f.no_hash_check;
  return j;
}

void Progress(const std::string& line) {
  std::fprintf(stderr, "ckpt faults: %s\n", line.c_str());
}

int RunCampaignCmd(const RunFlags& f) {
  CampaignOptions o;
  o.job = JobOf(f);
  o.mpi_extra = SplitWords(f.mpi_extra);
  o.work_dir = f.work;
  o.recover_layout = f.recover;
  if (!f.variants.empty()) o.variants = SplitList(f.variants);
  o.power_modes = SplitList(f.modes);
  o.rule = f.boundaries == "all" ? BoundaryRule::kAll : BoundaryRule::kSmart;
  for (auto& p : SplitList(f.points)) o.points.insert(p);
  for (auto& r : SplitList(f.ranks)) o.ranks.insert(std::atoi(r.c_str()));
  o.no_fsync = f.no_fsync;
  o.seed = uint64_t(f.seed);
  o.keep_runs = f.keep;
  if (!f.quiet) o.log = Progress;
  auto rep = RunCampaign(o);
  if (!rep.ok()) {
    std::fprintf(stderr, "ckpt faults run: %s\n", rep.status().ToString().c_str());
    return kExitError;
  }
  std::printf("%s", rep->Table().c_str());
  if (!f.json_out.empty()) WriteEvidence(f.json_out, rep->ToJson().dump(1) + "\n");
  if (!f.expect.empty()) {
    bool all = true;
    for (const auto& name : SplitList(f.expect)) {
      int64_t n = 0;
      for (auto o : {Outcome::kOld, Outcome::kNew, Outcome::kError, Outcome::kTorn, Outcome::kLost, Outcome::kHang})
        if (OutcomeName(o) == name) n = rep->Count(o);
      if (name == "torn")
        for (const auto& [kind, d] : rep->damage) n += d.torn;
      std::printf("negative control: %lld %s state(s) found%s\n", static_cast<long long>(n), name.c_str(),
                  n > 0 ? ", as the checker must" : " - THE CHECKER FOUND NOTHING");
      all = all && n > 0;
    }
    return all ? kExitOk : kExitCheckFailed;
  }
  return rep->violations() == 0 ? kExitOk : kExitCheckFailed;
}

int RunDeadlineCmd(const RunFlags& f) {
  DeadlineOptions o;
  o.job = JobOf(f);
  o.mpi_extra = SplitWords(f.mpi_extra);
  o.work_dir = f.work;
  for (const auto& s : SplitWords(f.scenarios)) {
    auto sc = ParseDeadlineScenario(s);
    if (!sc.ok()) {
      std::fprintf(stderr, "ckpt faults deadline: %s\n", sc.status().ToString().c_str());
      return kExitError;
    }
    o.scenarios.push_back(*sc);
  }
  if (!f.quiet) o.log = Progress;
  auto res = RunDeadlineChecks(o);
  if (!res.ok()) {
    std::fprintf(stderr, "ckpt faults deadline: %s\n", res.status().ToString().c_str());
    return kExitError;
  }
  std::printf("%s", DeadlineTable(*res, f.timeout_ms).c_str());
  for (const auto& r : *res)
    if (!r.problems.empty()) return kExitCheckFailed;
  return kExitOk;
}

void AddJobFlags(CLI::App* cmd, RunFlags* f) {
  cmd->add_option("--work", f->work, "scratch directory (wiped first)")->required();
  cmd->add_option("--layout", f->layout, "the faulted job's layout");
  cmd->add_option("--model", f->model, "GPT preset[:k=v,...]");
  cmd->add_option("--timeout-ms", f->timeout_ms, "deadline of every collective in the jobs");
  cmd->add_option("--mpirun", f->mpirun, "mpirun prefix before -np (default $CKPT_MPIRUN, $MPIRUN or a local one)");
  cmd->add_option("--mpi-extra", f->mpi_extra, "extra mpirun flags (default: faster MCA choices)");
  cmd->add_flag("--quiet", f->quiet, "no progress lines on stderr");
  cmd->add_option("--child-ckpt", f->child_ckpt,
                  "the ckpt executable the jobs run (default: this one; e.g. an older build, to compare)");
}

void RegisterRun(CLI::App* faults, int* exit_code) {
  auto* cmd = faults->add_subcommand("run", "Fault campaign: every boundary x rank x variant, recovered and checked");
  auto f = std::make_shared<RunFlags>();
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
  cmd->add_option("--expect", f->expect, "negative control: exit 0 only if each listed outcome (e.g. lost,torn) occurred");
  cmd->add_flag("--keep", f->keep, "keep every run directory");
  cmd->callback([=]() { *exit_code = RunCampaignCmd(*f); });
}

void RegisterDeadline(CLI::App* faults, int* exit_code) {
  auto* cmd = faults->add_subcommand(
      "deadline", "Hung, killed and failing ranks: every survivor fails in time naming the rank, nothing committed");
  auto f = std::make_shared<RunFlags>();
  f->timeout_ms = 1000;
  AddJobFlags(cmd, f.get());
  cmd->add_option("--scenarios", f->scenarios,
                  "space-separated <save|load>:<hang|sigkill|eio>@<point>#<nth>:r<rank>=<phase>");
  cmd->callback([=]() { *exit_code = RunDeadlineCmd(*f); });
}

void RegisterPowerLoss(CLI::App* faults, int* exit_code) {
  auto* cmd = faults->add_subcommand("powerloss", "Apply a recorded power cut (journals of --power-dir) to the disk");
  auto dir = std::make_shared<std::string>();
  auto mode = std::make_shared<std::string>("drop");
  auto seed = std::make_shared<int64_t>(1);
  cmd->add_option("--dir", *dir, "the jobs' --power-dir")->required();
  cmd->add_option("--mode", *mode, "drop, prefix or torn");
  cmd->add_option("--seed", *seed, "random choices of prefix/torn");
  cmd->callback([=]() {
    auto m = ParsePowerLossMode(*mode);
    auto r = m.ok() ? ApplyPowerLossDir(DefaultEnv(), *dir, *m, uint64_t(*seed)) : Result<PowerLossReport>(m.status());
    if (!r.ok()) std::fprintf(stderr, "ckpt faults powerloss: %s\n", r.status().ToString().c_str());
    else std::printf("power loss (%s): %s\n", mode->c_str(), r->ToString().c_str());
    *exit_code = r.ok() ? kExitOk : kExitError;
  });
}

void RegisterDamage(CLI::App* faults, int* exit_code) {
  auto* cmd = faults->add_subcommand("damage", "Damage a committed checkpoint: bit flip, truncate or delete a file");
  auto root = std::make_shared<std::string>();
  auto req = std::make_shared<DamageRequest>();
  auto kind = std::make_shared<std::string>("bitflip");
  auto iter = std::make_shared<int64_t>(-1);
  auto seed = std::make_shared<int64_t>(0);
  cmd->add_option("--root", *root, "checkpoint root")->required();
  cmd->add_option("--iter", *iter, "iteration (default: the tracker's)");
  cmd->add_option("--file", req->file, "shard file name in the iteration dir, or 'manifest'")->required();
  cmd->add_option("--kind", *kind, "bitflip, truncate or delete")->check(CLI::IsMember({"bitflip", "truncate", "delete"}));
  cmd->add_option("--chunk", req->chunk, "first, mid or last chunk of the file")->check(CLI::IsMember({"first", "mid", "last"}));
  cmd->add_option("--seed", *seed, "picks the byte and bit");
  cmd->callback([=]() {
    DamageRequest r = *req;
    r.kind = *ParseAction(*kind);
    r.seed = uint64_t(*seed);
    auto d = ApplyDamage(DefaultEnv(), *root, *iter, r);
    if (!d.ok()) std::fprintf(stderr, "ckpt faults damage: %s\n", d.status().ToString().c_str());
    else std::printf("damaged (%s): %s\n", kind->c_str(), d->ToString().c_str());
    *exit_code = d.ok() ? kExitOk : kExitError;
  });
}

void RegisterFaultTools(CLI::App* faults, int* exit_code) {
  RegisterRun(faults, exit_code);
  RegisterDeadline(faults, exit_code);
  RegisterPowerLoss(faults, exit_code);
  RegisterDamage(faults, exit_code);
}

}  // namespace

void RegisterFaults(CLI::App& app, int* exit_code) {
  auto* faults = app.add_subcommand("faults", "Fault injection: campaigns, hung ranks, power loss, damage");
  faults->require_subcommand(1);
  RegisterChild(faults, exit_code);
  RegisterFaultTools(faults, exit_code);
}

}  // namespace ckpt::cli
