// Configuration of the deterministic training workload (`ckpt train`).
//
// Modes:
//  - elementwise: every parameter element's gradient is a function of (seed,
//    tensor key, global element index, the global batch's sample ids, RNG
//    offset) and its own value; per-sample data terms are integers summed
//    exactly, so the reduced gradient and the Adam update are bit-identical
//    under every TP/PP/DP layout;
//  - tp-reduce: additionally the row-parallel weights (linear_proj, linear_fc2,
//    split on their last axis) get the gradient of a real matmul y = W x whose
//    partial products are summed by an all-reduce over TP: the float sum order
//    depends on TP, so resuming under another TP differs at the ulp level.
//
// ArgsJson() holds the arguments that change the math (not the layout, not the
// micro batch, not save/kill flags); it is saved with the resume state and a
// resumed job must match it (CheckArgs names every differing field).
//
// Value types; pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "ckpt/base/status.h"
#include "ckpt/workload/lr_schedule.h"

namespace ckpt::workload {

enum class TrainMode { kElementwise, kTpReduce };
std::string_view TrainModeName(TrainMode m);  // "elementwise", "tp-reduce"
Result<TrainMode> ParseTrainMode(std::string_view name);

// torch.optim.AdamW (decoupled weight decay), as MCore's fp32 main-param optimizer.
struct AdamConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.01;  // not applied to norms and biases (MCore no_wd)
};

struct TrainConfig {
  TrainMode mode = TrainMode::kElementwise;
  uint64_t seed = 1234;
  int64_t global_batch = 16;
  int64_t micro_batch = 2;     // per DP rank; may change between jobs
  int64_t total_samples = 1 << 20;
  double noise_scale = 0.25;   // weight of the RNG ("dropout-like") gradient noise
  LrConfig lr;
  AdamConfig adam;
  std::string model_name;      // for the record; the config itself is compared
  nlohmann::json model = nlohmann::json::object();  // GptConfigToJson
  int64_t inject_nan_step = -1;  // fault injection: a NaN gradient at this iteration

  Status Validate() const;
  nlohmann::json ArgsJson() const;
};

// OK iff `saved` (a checkpoint's ArgsJson) equals `mine`; else
// FailedPrecondition listing "field: checkpoint X, this job Y" for each difference.
Status CheckArgs(const nlohmann::json& saved, const nlohmann::json& mine);

// The element of the NaN fault injection: tensor key and global flat index.
inline constexpr const char* kNanTensor = "decoder.layers.0.mlp.linear_fc2.weight";
inline constexpr int64_t kNanIndex = 100;

}  // namespace ckpt::workload
