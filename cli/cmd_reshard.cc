// ckpt reshard: rewrite a checkpoint under another layout, offline
//               (library: ckpt/workload/model_reshard.h).
// ckpt plan:    the read plan of a load under another layout, without data
//               (library: ckpt/workload/load_plan.h).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/workload/model_reshard.h"
#include "ckpt/workload/load_plan.h"
#include "cli/commands.h"
#include "cli/progress.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;

Status Fail(const char* cmd, const Status& st) {
  std::fprintf(stderr, "ckpt %s: %s\n", cmd, st.ToString().c_str());
  return st;
}

}  // namespace

Status RunReshard(const ReshardFlags& f) {
  if (f.rules.given() || f.req.to.empty()) return RunRuleReshard(f);  // any checkpoint, by rules
  workload::ModelReshardRequest req = f.req;
  req.chunk_bytes = f.chunk_kb * 1024;
  // Counts the source's shard reads (the total is its files); the writes
  // follow them. Only the source's shard files: the destination's read-back
  // and the manifest each target rank re-reads are not progress (bytes once).
  CliProgress progress("reshard", f.json, f.no_progress, 0, req.env ? req.env : DefaultEnv(),
                       /*count_writes=*/false, ".h5");
  progress.SetTotalsFromManifest(req.src, req.iteration);
  progress.CountOnlyUnder(req.src);
  req.env = progress.env();
  auto r = workload::ReshardModelCheckpoint(req);
  progress.Finish();
  if (!r.ok()) return Fail("reshard", r.status());
  const OfflineReshardStats& s = r->stats;
  json out = {{"op", "reshard"}, {"from", r->from_layout}, {"to", r->to_layout},
              {"iteration", s.src_iteration}, {"bytes_read", s.bytes_read},
              {"bytes_written", s.bytes_written}, {"seconds", s.seconds}};
  if (f.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("reshard iter %lld %s -> %s: read %.1f MB, wrote %.1f MB in %.3f s; committed under %s\n",
                static_cast<long long>(s.src_iteration), r->from_layout.dump().c_str(), r->to_layout.c_str(),
                s.bytes_read / 1e6, s.bytes_written / 1e6, s.seconds, req.dst.c_str());
  }
  return Status::Ok();
}

Status RunPlan(const PlanFlags& f) {
  if (f.rules.given() || (f.req.to.empty() && f.req.simulate.empty())) return RunRulePlan(f);  // by rules
  workload::LoadPlanRequest req = f.req;
  req.chunk_bytes = f.chunk_kb * 1024;
  auto plan = workload::PlanLoad(req);
  if (!plan.ok()) return Fail("plan", plan.status());
  std::fputs(f.json ? (plan->dump(1) + "\n").c_str() : workload::PlanText(*plan).c_str(), stdout);
  return Status::Ok();
}

}  // namespace ckpt::cli
