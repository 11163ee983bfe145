// The Megatron-Core GPT family ("megatron_gpt") behind the ModelFamily seam
// (reshard/family.h): dense GPT and MoE layouts (reshard/megatron_gpt.h,
// reshard/megatron_moe.h), configs as GptConfigToJson writes them
// (reshard/gpt_config_json.h), vocabulary tensors padded per TP whose
// canonical rows are the config's vocab_size.
// Built into the registry; stateless and thread-safe.
#pragma once

#include <memory>

#include "reshard/family.h"

namespace ckpt::reshard {

inline constexpr const char* kMegatronGptFamily = "megatron_gpt";

std::shared_ptr<const ModelFamily> MegatronGptFamily();

}  // namespace ckpt::reshard
