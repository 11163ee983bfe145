// Offline reshard of a GPT checkpoint (ckpt's own keys, a model config in its
// metadata): every target rank's state - model shards, the source's
// model-space distributed-optimizer state in its format, or a `ckpt train`
// checkpoint's Adam state - built for ReshardOffline (offline_reshard.h).
// Bucket-space optimizer state is refused (FailedPrecondition: it loads only
// into its own bucket layout). `ckpt reshard` is a thin wrapper over this.
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

struct GptReshardRequest {
  std::string src, dst;
  std::string to;                         // target layout, e.g. "tp=2,pp=1,dp=1"
  int64_t iteration = -1;                 // -1: the latest
  std::string compression = "none";       // none | zstd
  int64_t chunk_bytes = 4 << 20;
  std::vector<std::string> drop_objects;  // per-rank object keys left out
  Env* env = nullptr;                     // nullptr: DefaultEnv()
};

struct GptReshardResult {
  OfflineReshardStats stats;
  nlohmann::json from_layout;  // the source's layout
  std::string to_layout;       // the target's, canonical
};

[[nodiscard]] Result<GptReshardResult> ReshardGptCheckpoint(const GptReshardRequest& req);

}  // namespace ckpt::workload
