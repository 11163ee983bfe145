// The "megatron_gpt" ModelFamily: an adapter from JSON configs to the typed
// GptConfig rules, so the generic layers need not name GptConfig.
#include "reshard/megatron_family.h"

#include "reshard/gpt_config_json.h"
#include "reshard/megatron_gpt.h"

namespace ckpt::reshard {
namespace {

class MegatronGpt final : public ModelFamily {
 public:
  std::string_view name() const override { return kMegatronGptFamily; }

  Result<nlohmann::json> ParseConfig(const nlohmann::json& config) const override {
    CKPT_ASSIGN_OR_RETURN(GptConfig cfg, GptConfigFromJson(config));
    return GptConfigToJson(cfg);
  }

  Result<std::vector<ModelShard>> Shards(const nlohmann::json& config, const ParallelConfig& pc,
                                         const RankCoords& coords) const override {
    CKPT_ASSIGN_OR_RETURN(GptConfig cfg, GptConfigFromJson(config));
    return GptShards(cfg, pc, coords);
  }

  // Vocabulary tensors (the only allow_shape_mismatch ones) are padded per
  // TP (PaddedVocabSize); their first vocab_size rows are the state.
  int64_t CanonicalRows(const nlohmann::json& config, const ShardedTensor& t) const override {
    const auto v = config.find("vocab_size");
    if (!t.allow_shape_mismatch || v == config.end() || !v->is_number_integer()) return -1;
    return v->get<int64_t>();
  }
};

}  // namespace

std::shared_ptr<const ModelFamily> MegatronGptFamily() {
  static const std::shared_ptr<const ModelFamily> family = std::make_shared<MegatronGpt>();
  return family;
}

}  // namespace ckpt::reshard
