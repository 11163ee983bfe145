// The work of one `ckpt faults child` rank: see child.h.
#include "faults/child.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "faults/fault_env.h"
#include "faults/inplace_storage.h"
#include "faults/jobs.h"
#include "faults/oracle.h"
#include "faults/power_loss.h"
#include "faults/power_loss_env.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"

namespace ckpt::faults {

using nlohmann::json;

void WriteEvidence(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  WriteStringToFileSync(DefaultEnv(), path, text).IgnoreError();
}

void AddFailure(json* result, const Status& st) {
  (*result)["error"] = st.ToString();
  if (st.has_origin()) {
    (*result)["origin_rank"] = st.origin_rank();
    (*result)["origin_phase"] = std::string(PhaseName(st.phase()));
  }
  if (!st.missing().empty()) {
    (*result)["missing_ranks"] = st.missing().ranks;
    (*result)["missing_hosts"] = st.missing().hosts;
    (*result)["missing_phase"] = std::string(PhaseName(st.missing().phase));
  }
}

std::string RankFile(const std::string& dir, const char* stem, int rank, const char* ext) {
  return dir.empty() ? "" : JoinPath(dir, std::string(stem) + std::to_string(rank) + ext);
}

Result<FaultPlan> PlanOf(const ChildOptions& f) {
  FaultPlan plan;
  if (!f.spec_file.empty()) {
    CKPT_ASSIGN_OR_RETURN(plan, LoadFaultPlanFile(DefaultEnv(), f.spec_file));
  }
  CKPT_ASSIGN_OR_RETURN(FaultPlan more, ParseFaultPlan(f.spec));
  for (auto& r : more.rules) plan.rules.push_back(std::move(r));
  plan.disable_sync = plan.disable_sync || more.disable_sync;
  return plan;
}

Status SaveCase(workload::GptJob& j, const reshard::GptConfig& model, const std::string& name, const ChildOptions& f,
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
  o.metadata = {{"model", reshard::GptModelMetadata(model, name)}};
  std::unique_ptr<Storage> in_place;  // through fenv: traced and faulted like the atomic commit's IO
  if (f.in_place_commit) {
    in_place = NewInPlaceStorage(&fenv, root);
    o.storage = in_place.get();
  }
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
  if (!r.ok()) AddFailure(&result, r.status());
  if (r.ok() && !r->warning.ok()) result["warning"] = r->warning.ToString();
  if (r.ok() && !r->warning.ok())
    std::fprintf(stderr, "ckpt faults child save: rank %d: committed iteration %lld, but %s\n", rank,
                 static_cast<long long>(f.iteration), r->warning.message().c_str());
  if (!f.trace_dir.empty())
    WriteEvidence(RankFile(f.trace_dir, "rank_", rank, ".jsonl"), TraceToJsonLines(fenv.Trace()));
  WriteEvidence(RankFile(result_dir, "rank_", rank, ".json"), result.dump() + "\n");
  return r.status();
}

Status SaveCases(workload::GptJob& j, const reshard::GptConfig& model, const std::string& name, const ChildOptions& f,
                 const FaultPlan& base) {
  CKPT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(DefaultEnv(), f.cases));
  const Millis resync(std::max<int64_t>(60000, 4 * f.timeout_ms));
  size_t pos = 0;
  for (int n = 0; pos < text.size(); ++n) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    json c = json::parse(text.substr(pos, nl - pos), nullptr, false);
    pos = nl + 1;
    if (!c.is_object()) continue;
    auto plan = ParseFaultPlan(c.value("spec", ""));
    auto comm = plan.ok() ? MpiComm::Create() : Result<std::unique_ptr<MpiComm>>(plan.status());
    CKPT_RETURN_IF_ERROR(comm.status());
    FaultPlan p = base;
    p.rules.insert(p.rules.end(), plan->rules.begin(), plan->rules.end());
    p.disable_sync = p.disable_sync || plan->disable_sync;
    Status st = SaveCase(j, model, name, f, c.value("root", ""), c.value("result_dir", ""), p, comm->get());
    if (!st.ok()) std::fprintf(stderr, "ckpt faults child save: case %d: rank %d: %s\n", n, j.rank(), st.ToString().c_str());
    CKPT_RETURN_IF_ERROR(j.comm->Barrier(resync, Phase::kCase));
  }
  return Status::Ok();
}

Result<LoadRank> StartLoadRank(const std::string& layout, const reshard::GptConfig& model, const std::string& name) {
  LoadRank lr;
  if (WorldOf(layout) == 1 && std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) {
    CKPT_ASSIGN_OR_RETURN(lr.local, LocalGptState(model, layout));
    lr.state = lr.local.get();
    return lr;
  }
  CKPT_ASSIGN_OR_RETURN(lr.job, workload::StartGptJob(layout, model, name));
  lr.state = lr.job->state.get();
  lr.comm = lr.job->comm.get();
  lr.rank = lr.job->rank();
  return lr;
}

}  // namespace ckpt::faults
