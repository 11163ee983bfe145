#include "ckpt/workload/lr_schedule.h"

#include <cmath>
#include <numbers>

namespace ckpt::workload {

Status LrConfig::Validate() const {
  if (!(max_lr >= 0) || !(min_lr >= 0) || min_lr > max_lr)
    return Status::InvalidArgument("lr schedule: need 0 <= min_lr <= max_lr");
  if (warmup_steps < 0 || decay_steps <= warmup_steps)
    return Status::InvalidArgument("lr schedule: need 0 <= warmup_steps < decay_steps (warmup " +
                                   std::to_string(warmup_steps) + ", decay " + std::to_string(decay_steps) + ")");
  if (style != "constant" && style != "linear" && style != "cosine")
    return Status::InvalidArgument("lr schedule: unknown decay style '" + style + "' (constant, linear, cosine)");
  return Status::Ok();
}

nlohmann::json LrConfig::ToJson() const {
  return {{"max_lr", max_lr}, {"min_lr", min_lr}, {"warmup_steps", warmup_steps},
          {"decay_steps", decay_steps}, {"style", style}};
}

Result<LrConfig> LrConfig::FromJson(const nlohmann::json& j) {
  LrConfig c;
  try {
    c.max_lr = j.at("max_lr").get<double>();
    c.min_lr = j.at("min_lr").get<double>();
    c.warmup_steps = j.at("warmup_steps").get<int64_t>();
    c.decay_steps = j.at("decay_steps").get<int64_t>();
    c.style = j.at("style").get<std::string>();
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("lr scheduler state: ") + e.what());
  }
  return c;
}

double LrScheduler::Lr() const {
  const double n = double(num_steps_);
  if (cfg_.warmup_steps > 0 && num_steps_ <= cfg_.warmup_steps)
    return cfg_.max_lr * n / double(cfg_.warmup_steps);
  if (cfg_.style == "constant") return cfg_.max_lr;
  if (num_steps_ > cfg_.decay_steps) return cfg_.min_lr;
  const double ratio = (n - double(cfg_.warmup_steps)) / double(cfg_.decay_steps - cfg_.warmup_steps);
  const double delta = cfg_.max_lr - cfg_.min_lr;
  const double coeff = cfg_.style == "linear" ? 1.0 - ratio : 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
  return cfg_.min_lr + coeff * delta;
}

nlohmann::json LrScheduler::StateJson() const { return {{"config", cfg_.ToJson()}, {"num_steps", num_steps_}}; }

Status LrScheduler::LoadState(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("config") || !j.contains("num_steps"))
    return Status::Corruption("lr scheduler state lacks config or num_steps");
  CKPT_ASSIGN_OR_RETURN(LrConfig saved, LrConfig::FromJson(j["config"]));
  const nlohmann::json mine = cfg_.ToJson(), theirs = saved.ToJson();
  for (const auto& [field, value] : mine.items())
    if (theirs[field] != value)
      return Status::FailedPrecondition("lr scheduler: this job's " + field + " = " + value.dump() +
                                        " but the checkpoint's is " + theirs[field].dump());
  try {
    num_steps_ = j["num_steps"].get<int64_t>();
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("lr scheduler num_steps: ") + e.what());
  }
  return Status::Ok();
}

}  // namespace ckpt::workload
