// Offline plan / reshard / consolidate of ANY checkpoint, from its manifest
// alone: every tensor's global shape and dtype come from the manifest, and the
// target sharding of each key from user rules, so no model config is needed
// (a checkpoint recording its model family is resharded by that family's
// rules: workload/model_reshard.h).
//
// Target layout: `ranks` target ranks; a tensor key takes the FIRST rule whose
// glob (fnmatch) matches it, "GLOB:axis=A:parts=P": the tensor is cut into P
// contiguous parts along axis A (part i: [i*L/P, (i+1)*L/P) of its length L),
// target rank r holds part r % P, and the ranks holding the same part are its
// replicas (replica id r / P, main replica on ranks 0..P-1). A key no rule
// matches is whole on every rank (main replica on rank 0). ranks = 1 without
// rules is the consolidated, unsharded checkpoint: one file, whole tensors.
// Errors (kInvalidArgument, naming the rule and the key): a malformed rule,
// P not dividing ranks, A not an axis of a matched tensor, P above its length.
//
// Objects follow ReshardOffline (offline_reshard.h): single-cell objects are
// carried over, per-rank objects fail the reshard unless named in
// drop_objects. Pure functions of the manifest except ReshardByRules (which
// writes and commits). Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/format/manifest.h"
#include "ckpt/protocol/offline_reshard.h"

namespace ckpt {

struct ShardRule {
  std::string glob;
  int axis = 0;
  int parts = 1;
  std::string text;  // as the user wrote it
};
// "GLOB:axis=A:parts=P" (the glob may itself hold ':'; the last two fields are
// parsed from the right).
Result<ShardRule> ParseShardRule(const std::string& text);

struct RuleLayout {
  int ranks = 1;
  std::vector<ShardRule> rules;
  // What the manifest records: {"ranks": N, "shard": [rule texts]}.
  nlohmann::json ToJson() const;
};
Result<RuleLayout> ParseRuleLayout(int ranks, const std::vector<std::string>& rules);

// The descriptors target rank `rank` holds: every tensor key of `m` (sorted),
// replicas included (main_only: only those it holds the main replica of).
Result<std::vector<ShardedTensor>> RuleTargetTensors(const Manifest& m, const RuleLayout& layout, int rank,
                                                     bool main_only = false);

// The read plan of loading `root` under `layout`, as JSON: from, to, ranks,
// bytes_read_total / _max_rank / _min_rank, bytes_read_total_share_job (the
// distinct chunks all ranks read), checkpoint_bytes, distinct_plans,
// saved_shards, plan_seconds, per_rank (when asked: rank, bytes_read, chunks,
// tensors, files).
Result<nlohmann::json> PlanByRules(const std::string& root, int64_t iteration, const RuleLayout& layout,
                                   bool per_rank);
std::string RulePlanText(const nlohmann::json& plan);

struct RuleReshardRequest {
  std::string src, dst;
  int64_t iteration = -1;  // -1: the latest
  RuleLayout layout;
  std::string compression = "none";
  int64_t chunk_bytes = 4 << 20;
  std::vector<std::string> drop_objects;
};
// Rewrites src under `layout` into dst (committed atomically; the source's
// metadata kept, its layout recorded as metadata.resharded_from).
Result<OfflineReshardStats> ReshardByRules(const RuleReshardRequest& req);

}  // namespace ckpt
