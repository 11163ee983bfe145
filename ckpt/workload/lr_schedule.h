// Learning-rate schedule with Megatron's semantics
// (megatron/core/optimizer_param_scheduler.py, OptimizerParamScheduler.get_lr):
// linear warmup from 0 to max_lr over warmup_steps, then "constant",
// "linear" or "cosine" decay to min_lr at decay_steps, min_lr after that.
// The lr of a training step is Lr() before Step() (MCore: optimizer.step()
// then scheduler.step(increment)).
//
// Checkpointed state: the config and num_steps. Resuming is strict like
// MCore's _check_and_set without override_opt_param_scheduler: a config that
// differs from the checkpoint's is an error naming the field.
//
// Value type; not thread-safe. Errors: InvalidArgument (bad config),
// FailedPrecondition (checkpoint disagrees), Corruption (unparsable state).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/base/status.h"

namespace ckpt::workload {

struct LrConfig {
  double max_lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 2;
  int64_t decay_steps = 100;  // independent of the run length, so a resumed run has the same schedule
  std::string style = "cosine";  // constant | linear | cosine

  Status Validate() const;
  nlohmann::json ToJson() const;
  static Result<LrConfig> FromJson(const nlohmann::json& j);
  bool operator==(const LrConfig&) const = default;
};

class LrScheduler {
 public:
  explicit LrScheduler(LrConfig cfg) : cfg_(std::move(cfg)) {}

  double Lr() const;
  void Step(int64_t increment = 1) { num_steps_ += increment; }
  int64_t num_steps() const { return num_steps_; }
  const LrConfig& config() const { return cfg_; }

  nlohmann::json StateJson() const;  // {"config": ..., "num_steps": n}
  // Restores num_steps; the saved config must equal ours.
  Status LoadState(const nlohmann::json& j);

 private:
  LrConfig cfg_;
  int64_t num_steps_ = 0;
};

}  // namespace ckpt::workload
