// GptConfig <-> JSON, as recorded in a checkpoint's manifest metadata under
// "gpt", so a later job (or `ckpt reshard`) can rebuild the Megatron layout
// rules of the saved model without being told the model again.
// Pure; thread-safe.
#pragma once

#include <nlohmann/json.hpp>

#include "reshard/parallel_state.h"
#include "ckpt/base/status.h"
#include "reshard/megatron_gpt.h"

namespace ckpt::reshard {

nlohmann::json GptConfigToJson(const GptConfig& cfg);
Result<GptConfig> GptConfigFromJson(const nlohmann::json& j);

// {"tp":..,"pp":..,"dp":..,"cp":..,"ep":..,"vpp":..,"world":..}
nlohmann::json LayoutToJson(const ParallelConfig& pc);
Result<ParallelConfig> LayoutFromJson(const nlohmann::json& j);

}  // namespace ckpt::reshard
