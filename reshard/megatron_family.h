// The Megatron-Core GPT family ("megatron_gpt") behind the ModelFamily seam
// (reshard/family.h): dense GPT and MoE layouts (reshard/megatron_gpt.h,
// reshard/megatron_moe.h), configs as GptConfigToJson writes them
// (reshard/gpt_config_json.h), vocabulary tensors padded per TP whose
// canonical rows are the config's vocab_size.
// Built into the registry; stateless and thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "reshard/family.h"
#include "reshard/megatron_gpt.h"

namespace ckpt::reshard {

inline constexpr const char* kMegatronGptFamily = "megatron_gpt";

std::shared_ptr<const ModelFamily> MegatronGptFamily();

// The manifest metadata "model" value of a GPT checkpoint:
// {"family": "megatron_gpt", "config": GptConfigToJson(cfg), "name": name}
// (`name`: the preset or source the config came from, e.g. "tiny", "custom").
nlohmann::json GptModelMetadata(const GptConfig& cfg, const std::string& name);

// The GPT config recorded in manifest metadata ("model" of family
// megatron_gpt, or the "gpt" object of checkpoints written before the family
// seam); nullopt when no model is recorded. kFailedPrecondition when another
// family is recorded (`what` - the tool asking - needs a GPT), the family
// lookup's kNotFound, kInvalidArgument for a bad config (naming its key).
Result<std::optional<GptConfig>> RecordedGptConfig(const nlohmann::json& metadata, const std::string& what);

// The recorded model's name: "model"."name", or (before the seam) the string
// "model"; "custom" when none is recorded.
std::string RecordedModelName(const nlohmann::json& metadata);

}  // namespace ckpt::reshard
