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

nlohmann::json GptModelMetadata(const GptConfig& cfg, const std::string& name) {
  nlohmann::json j = ModelMetadata(*MegatronGptFamily(), GptConfigToJson(cfg));
  j["name"] = name;
  return j;
}

Result<std::optional<GptConfig>> RecordedGptConfig(const nlohmann::json& metadata, const std::string& what) {
  const bool legacy = !(metadata.is_object() && metadata.contains("model") && metadata["model"].is_object());
  const std::string key = legacy ? "metadata.gpt" : "metadata.model";
  Result<std::optional<ModelRef>> model = ModelOf(metadata);
  if (!model.ok()) return model.status().WithContext("checkpoint " + key);
  if (!model->has_value()) return std::optional<GptConfig>();
  const ModelRef& ref = **model;
  if (ref.family->name() != kMegatronGptFamily)
    return Status::FailedPrecondition(what + " needs a " + kMegatronGptFamily + " checkpoint; this one records model family '" +
                                      std::string(ref.family->name()) + "'");
  Result<GptConfig> cfg = GptConfigFromJson(ref.config);
  if (!cfg.ok()) return cfg.status().WithContext("checkpoint " + key);
  return std::optional<GptConfig>(*cfg);
}

std::string RecordedModelName(const nlohmann::json& metadata) {
  if (!metadata.is_object() || !metadata.contains("model")) return "custom";
  const nlohmann::json& m = metadata["model"];
  if (m.is_string()) return m.get<std::string>();
  if (m.is_object() && m.contains("name") && m["name"].is_string()) return m["name"].get<std::string>();
  return "custom";
}

}  // namespace ckpt::reshard
