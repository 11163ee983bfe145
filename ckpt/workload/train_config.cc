#include "ckpt/workload/train_config.h"

namespace ckpt::workload {

std::string_view TrainModeName(TrainMode m) {
  return m == TrainMode::kElementwise ? "elementwise" : "tp-reduce";
}

Result<TrainMode> ParseTrainMode(std::string_view name) {
  if (name == "elementwise") return TrainMode::kElementwise;
  if (name == "tp-reduce") return TrainMode::kTpReduce;
  return Status::InvalidArgument("unknown training mode '" + std::string(name) + "' (elementwise, tp-reduce)");
}

Status TrainConfig::Validate() const {
  if (global_batch <= 0 || micro_batch <= 0 || total_samples < global_batch)
    return Status::InvalidArgument("train: need global_batch > 0, micro_batch > 0, total_samples >= global_batch");
  if (!(noise_scale >= 0)) return Status::InvalidArgument("train: noise_scale must be >= 0");
  if (!(adam.beta1 >= 0 && adam.beta1 < 1 && adam.beta2 >= 0 && adam.beta2 < 1 && adam.eps > 0 &&
        adam.weight_decay >= 0))
    return Status::InvalidArgument("train: Adam needs 0 <= beta < 1, eps > 0, weight_decay >= 0");
  return lr.Validate();
}

nlohmann::json TrainConfig::ArgsJson() const {
  return {{"mode", std::string(TrainModeName(mode))},
          {"seed", seed},
          {"global_batch", global_batch},
          {"total_samples", total_samples},
          {"noise_scale", noise_scale},
          {"lr", lr.ToJson()},
          {"adam", {{"beta1", adam.beta1}, {"beta2", adam.beta2}, {"eps", adam.eps},
                    {"weight_decay", adam.weight_decay}}},
          {"model", model}};
}

namespace {

// Leaf-by-leaf differences of two JSON objects ("a.b: checkpoint X, this job Y").
void Differences(const nlohmann::json& saved, const nlohmann::json& mine, const std::string& path,
                 std::string* out) {
  if (saved.is_object() && mine.is_object()) {
    for (const auto& [k, v] : mine.items())
      Differences(saved.contains(k) ? saved[k] : nlohmann::json(), v, path.empty() ? k : path + "." + k, out);
    for (const auto& [k, v] : saved.items())
      if (!mine.contains(k)) Differences(v, nlohmann::json(), path.empty() ? k : path + "." + k, out);
    return;
  }
  if (saved == mine) return;
  *out += (out->empty() ? "" : "; ") + path + ": checkpoint " + (saved.is_null() ? "(none)" : saved.dump()) +
          ", this job " + (mine.is_null() ? "(none)" : mine.dump());
}

}  // namespace

Status CheckArgs(const nlohmann::json& saved, const nlohmann::json& mine) {
  std::string diffs;
  Differences(saved, mine, "", &diffs);
  if (diffs.empty()) return Status::Ok();
  return Status::FailedPrecondition("training arguments differ from the checkpoint's (" + diffs + ")");
}

}  // namespace ckpt::workload
