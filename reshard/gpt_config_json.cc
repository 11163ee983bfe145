#include "reshard/gpt_config_json.h"

#include "reshard/megatron_moe.h"

namespace ckpt::reshard {

using nlohmann::json;

json GptConfigToJson(const GptConfig& c) {
  json j = {{"vocab_size", c.vocab_size},
          {"hidden", c.hidden},
          {"ffn_hidden", c.ffn_hidden},
          {"num_layers", c.num_layers},
          {"num_heads", c.num_heads},
          {"num_query_groups", c.num_query_groups},
          {"kv_channels", c.kv_channels},
          {"swiglu", c.swiglu},
          {"tied_embeddings", c.tied_embeddings},
          {"add_bias_linear", c.add_bias_linear},
          {"qkv_bias", c.qkv_bias},
          {"make_vocab_size_divisible_by", c.make_vocab_size_divisible_by},
          {"dtype", std::string(DTypeName(c.dtype))},
          {"first_stage_layers", c.first_stage_layers},
          {"last_stage_layers", c.last_stage_layers},
          {"stack_layers", c.stack_layers},
          {"extra_state", c.extra_state},
          {"norm_keys", std::string(NormKeysName(c.norm_keys))}};
  MoeConfigToJson(c, &j);
  return j;
}

namespace {

// Integer fields must be JSON integers within range (nlohmann would narrow
// 2^40 to an int, or truncate 64.5, without a word).
Status CheckIntegerFields(const json& j) {
  if (!j.is_object()) return Status::InvalidArgument("GPT config must be a JSON object, not " + std::string(j.type_name()));
  static constexpr const char* kInt32[] = {"num_layers", "num_heads", "num_query_groups", "first_stage_layers",
                                           "last_stage_layers", "num_experts"};
  static constexpr const char* kInt64[] = {"vocab_size", "hidden", "ffn_hidden", "kv_channels",
                                           "make_vocab_size_divisible_by", "moe_ffn_hidden"};
  auto check = [&](const char* key, int64_t lo, int64_t hi) -> Status {
    if (!j.contains(key)) return Status::Ok();
    const json& v = j[key];
    const bool ok = v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) &&
                    v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
    if (ok) return Status::Ok();
    return Status::InvalidArgument(std::string("GPT config field ") + key + "=" + v.dump().substr(0, 40) +
                                   " is not an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  for (const char* k : kInt32) CKPT_RETURN_IF_ERROR(check(k, INT32_MIN, INT32_MAX));
  for (const char* k : kInt64) CKPT_RETURN_IF_ERROR(check(k, INT64_MIN, INT64_MAX));
  return Status::Ok();
}

}  // namespace

Result<GptConfig> GptConfigFromJson(const json& j) {
  CKPT_RETURN_IF_ERROR(CheckIntegerFields(j));
  GptConfig c;
  try {
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.hidden = j.at("hidden").get<int64_t>();
    c.ffn_hidden = j.at("ffn_hidden").get<int64_t>();
    c.num_layers = j.at("num_layers").get<int>();
    c.num_heads = j.at("num_heads").get<int>();
    c.num_query_groups = j.value("num_query_groups", 0);
    c.kv_channels = j.value("kv_channels", int64_t{0});
    c.swiglu = j.value("swiglu", true);
    c.tied_embeddings = j.value("tied_embeddings", false);
    c.add_bias_linear = j.value("add_bias_linear", false);
    c.qkv_bias = j.value("qkv_bias", false);
    c.make_vocab_size_divisible_by = j.value("make_vocab_size_divisible_by", int64_t{128});
    CKPT_ASSIGN_OR_RETURN(c.dtype, ParseDType(j.value("dtype", std::string("bf16"))));
    c.first_stage_layers = j.value("first_stage_layers", -1);
    c.last_stage_layers = j.value("last_stage_layers", -1);
    c.stack_layers = j.value("stack_layers", false);
    c.extra_state = j.value("extra_state", false);
    // Checkpoints written before MCore's norm keys were adopted record no style.
    CKPT_ASSIGN_OR_RETURN(c.norm_keys, ParseNormKeys(j.value("norm_keys", std::string("legacy"))));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("bad GPT config in checkpoint metadata: ") + e.what());
  }
  CKPT_RETURN_IF_ERROR(MoeConfigFromJson(j, &c));
  CKPT_RETURN_IF_ERROR(c.Validate());
  return c;
}

json LayoutToJson(const ParallelConfig& pc) {
  return {{"tp", pc.tp}, {"pp", pc.pp}, {"dp", pc.dp}, {"cp", pc.cp},
          {"ep", pc.ep}, {"vpp", pc.vpp}, {"world", pc.world_size()}};
}

Result<ParallelConfig> LayoutFromJson(const json& j) {
  ParallelConfig pc;
  try {
    pc.tp = j.value("tp", 1);
    pc.pp = j.value("pp", 1);
    pc.dp = j.value("dp", 1);
    pc.cp = j.value("cp", 1);
    pc.ep = j.value("ep", 1);
    pc.vpp = j.value("vpp", 1);
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("bad layout in checkpoint: ") + e.what());
  }
  CKPT_RETURN_IF_ERROR(pc.Validate());
  return pc;
}

}  // namespace ckpt::reshard
