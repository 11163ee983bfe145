// ckpt-lab faults child --phase save|load: one rank of a faulted job (run under
// mpirun by the campaign and the deadline checks). The work is library code
// (faults/child.h); this file parses the options and ends the process the
// way a faulted rank must: without MPI_Finalize, which can block on a dead peer.
#include <unistd.h>

#include <cstdio>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/workload/rank_report.h"
#include "cli/commands.h"
#include "harness/lab/lab_commands.h"
#include "cli/gpt_job.h"
#include "faults/child.h"
#include "faults/fault_env.h"
#include "faults/oracle.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;
using namespace ckpt::faults;

// A failed rank: report, then end without MPI_Finalize, which can block on a
// dead peer, with the exit code main would give `st` (ExitCodeOf).
[[noreturn]] void DieChild(const char* phase, int rank, const Status& st, const std::string& result_path,
                           json result) {
  std::fprintf(stderr, "ckpt faults child %s: rank %d: %s\n", phase, rank, st.ToString().c_str());
  result["ok"] = false;
  AddFailure(&result, st);
  result["t_end_ns"] = MonotonicNs();
  WriteEvidence(result_path, result.dump() + "\n");
  std::fflush(stdout);
  std::fflush(stderr);
  _exit(ExitCodeOf(st));
}

Status ChildSave(const FaultChildFlags& f) {
  std::string name;
  auto model = ResolveModel(f.model, f.root, -1, &name);
  auto plan = model.ok() ? PlanOf(f) : Result<FaultPlan>(model.status());
  if (!plan.ok()) DieChild("save", -1, plan.status(), "", json::object());
  auto job = StartGptJob(f.layout, *model, name);
  if (!job.ok()) DieChild("save", -1, job.status(), "", json::object());
  GptJob& j = **job;
  Status st = FillForIteration(*j.state, model->vocab_size, f.iteration);
  if (st.ok()) st = j.comm->Barrier(Millis(f.timeout_ms), Phase::kStart);
  if (!st.ok()) DieChild("save", j.rank(), st, "", json::object());
  if (!f.cases.empty()) {
    st = SaveCases(j, *model, name, f, *plan);
    if (!st.ok()) DieChild("save", j.rank(), st, "", json::object());
    return Status::Ok();
  }
  st = SaveCase(j, *model, name, f, f.root, f.result_dir, *plan, j.comm.get());
  if (!st.ok()) DieChild("save", j.rank(), st, "", json::object());
  Print0(j, "%s\n", json{{"ok", true}, {"iteration", f.iteration}}.dump().c_str());
  return Status::Ok();
}

Status ChildLoad(const FaultChildFlags& f) {
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
    Status st = lr->comm->Barrier(o.timeout, Phase::kStart);
    if (!st.ok()) DieChild("load", rank, st, result_path, result);
  }
  result["t_start_ns"] = MonotonicNs();
  auto r = LoadCheckpoint(sd, o);
  if (!r.ok()) DieChild("load", rank, r.status(), result_path, result);  // agreed by the loader on every rank
  json mine = LoadVerdict(r, *lr->state, model->vocab_size);
  result.update(mine);
  result["t_end_ns"] = MonotonicNs();
  WriteEvidence(result_path, result.dump() + "\n");
  json merged = mine;
  if (lr->comm) {
    auto all = workload::AllGatherJson(*lr->comm, mine, o.timeout, Phase::kReport);
    if (!all.ok()) DieChild("load", rank, all.status(), "", result);
    merged = MergeLoadVerdicts(*all);
  }
  if (rank == 0) std::printf("%s\n", merged.dump().c_str());
  std::fflush(stdout);
  if (!merged.value("ok", false)) return Status::Aborted("the ranks' load verdicts are not ok: " + merged.dump());
  if (merged.value("mismatches", int64_t(0)) == 0) return Status::Ok();
  return CheckFailed("loaded values mismatch: " + merged.dump());
}

}  // namespace

Status RunFaultChild(const FaultChildFlags& f) { return f.phase == "save" ? ChildSave(f) : ChildLoad(f); }

}  // namespace ckpt::cli
