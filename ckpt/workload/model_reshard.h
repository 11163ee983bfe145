// Offline reshard of a checkpoint whose metadata records its model (a
// registered family and its config, reshard/family.h): every target rank's
// state - the family's model shards, the source's model-space
// distributed-optimizer state in its format (megatron_gpt only), or a `ckpt
// train` checkpoint's Adam state - built for ReshardOffline
// (offline_reshard.h). Bucket-space optimizer state is refused
// (FailedPrecondition: it loads only into its own bucket layout), as is
// distributed-optimizer state of another family. `ckpt reshard --to` is a
// thin wrapper over this.
// Thread safety: one call per process at a time (ReshardOffline's contract).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"
#include "ckpt/protocol/offline_reshard.h"

namespace ckpt::workload {

struct ModelReshardRequest {
  std::string src, dst;
  std::string to;                         // target layout, e.g. "tp=2,pp=1,dp=1"
  int64_t iteration = -1;                 // -1: the latest
  std::string compression = "none";       // none | zstd
  int64_t chunk_bytes = 4 << 20;
  std::vector<std::string> drop_objects;  // per-rank object keys left out
  Env* env = nullptr;                     // nullptr: DefaultEnv()
};

struct ModelReshardResult {
  OfflineReshardStats stats;
  nlohmann::json from_layout;  // the source's layout
  std::string to_layout;       // the target's, canonical
};

[[nodiscard]] Result<ModelReshardResult> ReshardModelCheckpoint(const ModelReshardRequest& req);

}  // namespace ckpt::workload
