// Checkpoint key names of the training workload (see train_workload.h).
// Constants only; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace ckpt::workload {

inline constexpr const char* kOptimizerStates[3] = {"fp32_param", "exp_avg", "exp_avg_sq"};
inline constexpr const char* kStepTensor = "optimizer.step";  // as reshard/dist_optimizer.h
inline constexpr const char* kArgs = "resume.args";
inline constexpr const char* kProgress = "resume.progress";
inline constexpr const char* kIterator = "resume.data_iterator";
inline constexpr const char* kRng = "resume.rng";
inline constexpr const char* kLr = "resume.lr_scheduler";

// "optimizer.state.<state>.<model key>", as MCore's model-space optimizer state.
inline std::string OptimizerKey(std::string_view state, std::string_view model_key) {
  return "optimizer.state." + std::string(state) + "." + std::string(model_key);
}

}  // namespace ckpt::workload
