// PlanLoad: see load_plan.h.
#include "ckpt/workload/load_plan.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "ckpt/base/clock.h"
#include "ckpt/format/chunk_layout.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/workload/job_setup.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"

namespace ckpt::workload {

using nlohmann::json;

Result<SavedModel> ReadSavedModel(const std::string& root, int64_t iteration) {
  SavedModel s;
  CKPT_ASSIGN_OR_RETURN(s.manifest, ReadManifest(nullptr, root, iteration));
  Result<std::optional<reshard::ModelRef>> model = reshard::ModelOf(s.manifest.metadata);
  if (!model.ok()) return model.status().WithContext("checkpoint under '" + root + "'");
  if (!model->has_value())
    return Status::InvalidArgument("checkpoint under '" + root +
                                   "' records no model in its metadata: the layout rules of its tensors are unknown; "
                                   "give the target sharding per key instead (ckpt plan/reshard --ranks N "
                                   "--shard KEY_GLOB:axis=A:parts=P, or --to-unsharded)");
  s.model = **model;
  return s;
}

Result<std::vector<reshard::ModelShard>> TargetShards(const reshard::ModelRef& model, const ParallelConfig& pc,
                                                      int rank) {
  CKPT_ASSIGN_OR_RETURN(RankCoords c, CoordsOf(pc, rank));
  return model.family->Shards(model.config, pc, c);
}

namespace {

// The saved shard index a job of layout `from` would write: every main
// replica of every rank, file = the rank's index, chunks as the writer lays
// them out (raw sizes).
Result<std::vector<reshard::SavedShard>> SimulatedSaved(const reshard::ModelRef& model, const ParallelConfig& from,
                                                        int64_t chunk_bytes) {
  std::vector<reshard::SavedShard> saved;
  for (int r = 0; r < from.world_size(); ++r) {
    CKPT_ASSIGN_OR_RETURN(auto shards, TargetShards(model, from, r));
    for (const auto& g : shards) {
      if (!g.tensor.is_main_replica()) continue;
      CKPT_ASSIGN_OR_RETURN(int64_t chunk_elems, ShardChunkElems(g.tensor, chunk_bytes));
      reshard::SavedShard ss{g.tensor, r, chunk_elems, {}};
      const int64_t n = g.tensor.num_elements();
      const int64_t chunks = chunk_elems > 0 ? (n + chunk_elems - 1) / chunk_elems : 0;
      ss.chunk_stored_bytes.assign(size_t(chunks), chunk_elems * int64_t(DTypeSize(g.tensor.dtype)));
      saved.push_back(std::move(ss));
    }
  }
  return saved;
}

Result<SavedModel> SavedForPlan(const LoadPlanRequest& req, std::vector<reshard::SavedShard>* shards) {
  SavedModel saved;
  if (!req.simulate.empty()) {
    std::string name;
    CKPT_ASSIGN_OR_RETURN(reshard::GptConfig gpt, ResolveModel(req.simulate, "", -1, &name));  // preset[:k=v,...]
    saved.model = {reshard::MegatronGptFamily().get(), reshard::GptConfigToJson(gpt)};
    CKPT_ASSIGN_OR_RETURN(ParallelConfig from, ParallelConfig::Parse(req.from));
    CKPT_ASSIGN_OR_RETURN(*shards, SimulatedSaved(saved.model, from, req.chunk_bytes));
    saved.manifest.layout = reshard::LayoutToJson(from);
    for (int r = 0; r < from.world_size(); ++r) saved.manifest.files.push_back({ShardFileName(r), r, 0, ""});
    for (const auto& s : *shards)
      for (int64_t b : s.chunk_stored_bytes) saved.manifest.files[s.file_index].size += uint64_t(b);
    return saved;
  }
  if (req.root.empty()) return Status::InvalidArgument("give a checkpoint root, or --simulate <preset> --from <layout>");
  CKPT_ASSIGN_OR_RETURN(saved, ReadSavedModel(req.root, req.iteration));
  *shards = SavedShardsOf(saved.manifest);
  return saved;
}


// Every target rank's plan; ranks requesting identical descriptors (DP
// replicas) share one.
struct RankPlans {
  std::map<std::string, reshard::ReadPlan> distinct;
  std::vector<const reshard::ReadPlan*> of_rank;
  std::vector<size_t> tensors;
};

Result<RankPlans> PlanRanks(const SavedModel& saved, const std::vector<reshard::SavedShard>& shards,
                            const ParallelConfig& target) {
  RankPlans p;
  for (int r = 0; r < target.world_size(); ++r) {
    CKPT_ASSIGN_OR_RETURN(auto want, TargetShards(saved.model, target, r));
    std::vector<ShardedTensor> requests;
    std::string key;
    for (const auto& g : want) {
      requests.push_back(g.tensor);
      key += g.tensor.DebugString() + ';';
    }
    auto cached = p.distinct.find(key);
    if (cached == p.distinct.end()) {
      auto computed = reshard::PlanReads(shards, requests);
      if (!computed.ok()) return computed.status().WithContext("target rank " + std::to_string(r));
      cached = p.distinct.emplace(std::move(key), std::move(computed).value()).first;
    }
    p.of_rank.push_back(&cached->second);
    p.tensors.push_back(requests.size());
  }
  return p;
}

}  // namespace

Result<json> PlanLoad(const LoadPlanRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<reshard::SavedShard> shards;
  CKPT_ASSIGN_OR_RETURN(SavedModel saved, SavedForPlan(req, &shards));
  CKPT_ASSIGN_OR_RETURN(ParallelConfig target, ParallelConfig::Parse(req.to));
  CKPT_ASSIGN_OR_RETURN(RankPlans plans, PlanRanks(saved, shards, target));
  json ranks = json::array();
  int64_t total = 0, mx = 0, mn = INT64_MAX;
  std::map<int, std::set<const reshard::ReadPlan*>> dp_groups;  // as `ckpt load --share-reads dp`
  for (int r = 0; r < target.world_size(); ++r) {
    const reshard::ReadPlan* plan = plans.of_rank[size_t(r)];
    CKPT_ASSIGN_OR_RETURN(auto group, GroupRanks(target, r, Group::kDpCp));
    dp_groups[group.front()].insert(plan);
    if (req.per_rank) {
      std::vector<std::string> files;
      for (int fi : plan->files) files.push_back(saved.manifest.files[fi].name);
      ranks.push_back({{"rank", r}, {"bytes_read", plan->bytes_read}, {"chunks", plan->chunks_read},
                       {"tensors", plans.tensors[size_t(r)]}, {"files", files}});
    }
    total += plan->bytes_read;
    mx = std::max(mx, plan->bytes_read);
    mn = std::min(mn, plan->bytes_read);
  }
  int64_t dp_shared = 0;
  for (const auto& [color, group] : dp_groups) dp_shared += reshard::UnionStoredBytes(group, shards);
  const std::set<const reshard::ReadPlan*> all(plans.of_rank.begin(), plans.of_rank.end());
  json out = {{"bytes_read_total_share_dp", dp_shared}, {"bytes_read_total_share_job", reshard::UnionStoredBytes(all, shards)},
              {"from", saved.manifest.layout}, {"to", target.ToString()}, {"ranks", target.world_size()},
              {"bytes_read_total", total}, {"bytes_read_max_rank", mx}, {"bytes_read_min_rank", mn},
              {"checkpoint_bytes", saved.manifest.TotalStoredBytes()}, {"distinct_plans", plans.distinct.size()},
              {"saved_shards", shards.size()}, {"dp_groups", dp_groups.size()},
              {"plan_seconds", Since(t0)}};
  if (req.per_rank) out["per_rank"] = ranks;
  return out;
}

std::string PlanText(const json& p) {
  char line[512];
  std::string out;
  std::snprintf(line, sizeof line,
                "plan %s -> %s: %d ranks read %.1f MB in total (checkpoint %.1f MB), per rank max %.1f / min %.1f MB; "
                "planned in %.3f s\n",
                p["from"].dump().c_str(), p["to"].get<std::string>().c_str(), p["ranks"].get<int>(),
                p["bytes_read_total"].get<double>() / 1e6, p["checkpoint_bytes"].get<double>() / 1e6,
                p["bytes_read_max_rank"].get<double>() / 1e6, p["bytes_read_min_rank"].get<double>() / 1e6,
                p["plan_seconds"].get<double>());
  out += line;
  std::snprintf(line, sizeof line, "plan with read sharing: %.1f MB from disk with --share-reads dp (%zu groups), %.1f MB with job\n",
                p["bytes_read_total_share_dp"].get<double>() / 1e6, p["dp_groups"].get<size_t>(),
                p["bytes_read_total_share_job"].get<double>() / 1e6);
  out += line;
  if (p.contains("per_rank"))
    for (const auto& r : p["per_rank"]) {
      std::snprintf(line, sizeof line, "  rank %3d: %10.3f MB, %5lld chunks, %zu files\n", r["rank"].get<int>(),
                    r["bytes_read"].get<double>() / 1e6, static_cast<long long>(r["chunks"].get<int64_t>()),
                    r["files"].size());
      out += line;
    }
  return out;
}

}  // namespace ckpt::workload
