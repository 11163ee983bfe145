// `ckpt plan` as library code: the read plan of loading a checkpoint
// under another layout, without reading data - per target rank the bytes,
// chunks and files it reads, and what a read-sharing group (load_share.h)
// reads from disk together. The checkpoint is real (its manifest) or
// simulated (a preset saved under `from`, chunked as the shard writer would:
// ShardChunkElems), so 70B/405B plans need no files.
//
// Pure functions of their arguments and the manifest on disk; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/format/manifest.h"
#include "reshard/family.h"
#include "reshard/parallel_state.h"
#include "reshard/geometry/read_plan.h"

namespace ckpt::workload {

// A checkpoint's manifest and the model (family and config) its metadata
// records (reshard/family.h ModelOf).
struct SavedModel {
  Manifest manifest;
  reshard::ModelRef model;
};
// kInvalidArgument if the metadata records no model; ModelOf's errors (an
// unregistered family: kNotFound naming it).
Result<SavedModel> ReadSavedModel(const std::string& root, int64_t iteration);

// The model descriptors of target rank `rank` of layout `pc`.
Result<std::vector<reshard::ModelShard>> TargetShards(const reshard::ModelRef& model, const ParallelConfig& pc,
                                                      int rank);

struct LoadPlanRequest {
  std::string root = {};      // a real checkpoint, or
  int64_t iteration = -1;
  std::string simulate = {};  // a preset[:k=v,...] never written, saved under
  std::string from = {};      // this layout,
  int64_t chunk_bytes = 4 << 20;  // with this chunk size
  std::string to = {};        // the target layout
  bool per_rank = false;     // list every target rank
};

// The plan as JSON (what `ckpt plan --json` prints): from, to, ranks,
// bytes_read_total/max_rank/min_rank, bytes_read_total_share_dp/_job,
// checkpoint_bytes, plan_seconds, distinct_plans, saved_shards, dp_groups,
// per_rank (if asked).
Result<nlohmann::json> PlanLoad(const LoadPlanRequest& req);
// Its text form (two lines, plus one per rank if listed).
std::string PlanText(const nlohmann::json& plan);

}  // namespace ckpt::workload
