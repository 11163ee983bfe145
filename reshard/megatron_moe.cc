// MoE MLP shards with Megatron-Core layouts (see megatron_moe.h for the rules).
#include "reshard/megatron_moe.h"

namespace ckpt::reshard {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

struct MoeEmitter {
  const GptConfig& cfg;
  const ParallelConfig& pc;
  const RankCoords& c;
  const MoeLayerPlace& place;
  std::vector<GptShard>* out;

  // Registers one shard; `expert` >= 0 prepends the expert axis, then the
  // layer axis goes in front of it when stacked (MCore appends the expert
  // offset after the layer's sharded_offsets).
  void Emit(const std::string& name, const std::string& param, Shape global, Shape offset,
            Shape local, ReplicaId rep, Shape param_shape, int64_t param_offset, int expert) {
    if (expert >= 0) {
      global.insert(global.begin(), cfg.num_experts);
      offset.insert(offset.begin(), expert);
      local.insert(local.begin(), 1);
    }
    if (place.stacked_layer >= 0) {
      global.insert(global.begin(), cfg.num_layers);
      offset.insert(offset.begin(), place.stacked_layer);
      local.insert(local.begin(), 1);
    }
    ShardedTensor t;
    t.key = place.key_prefix + name;
    t.dtype = cfg.dtype;
    t.global_shape = std::move(global);
    t.global_offset = std::move(offset);
    t.local_shape = std::move(local);
    t.replica_id = std::move(rep);
    out->push_back({std::move(t), place.param_prefix + param, std::move(param_shape), param_offset, std::nullopt});
  }

  // Experts are replicated over expert-DP (MCore: replica_id[2] = expert DP rank).
  ReplicaId ExpertSplit() const { return {0, 0, c.expert_dp}; }
  ReplicaId ExpertTpReplicated() const { return {0, c.tp, c.expert_dp}; }

  // Column-parallel expert tensor (weight [rows, h] or bias [rows]); SwiGLU
  // halves go to W block r and V block tp + r of the global rows.
  void ColumnParallel(const std::string& name, const std::string& param, const Shape& global,
                      bool swiglu, int expert) {
    Shape local = global;
    if (!swiglu) {
      local[0] /= pc.tp;
      Shape off(global.size(), 0);
      off[0] = c.tp * local[0];
      return Emit(name, param, global, off, local, ExpertSplit(), local, 0, expert);
    }
    const int64_t half = global[0] / 2 / pc.tp;
    local[0] = half;
    Shape param_shape = global;
    param_shape[0] = 2 * half;
    Shape w_off(global.size(), 0), v_off(global.size(), 0);
    w_off[0] = c.tp * half;
    v_off[0] = (pc.tp + c.tp) * half;
    Emit(name, param, global, w_off, local, ExpertSplit(), param_shape, 0, expert);
    Emit(name, param, global, v_off, local, ExpertSplit(), param_shape, NumElements(local), expert);
  }

  // The registered key of expert tensor `name` ("linear_fc1.weight").
  std::string Key(const std::string& name) const {
    return cfg.expert_keys == GptConfig::ExpertKeys::kMcore ? "mlp.experts.experts." + name
                                                            : "mlp.experts." + name;
  }

  // MCore's _extra_state of expert `e`'s linear layer whose weight shard is out[at].
  void AttachExtraState(size_t at, int e) {
    if (!cfg.extra_state) return;
    std::vector<std::pair<int64_t, int64_t>> axes;
    if (place.stacked_layer >= 0) axes.push_back({place.stacked_layer, cfg.num_layers});
    axes.push_back({e, cfg.num_experts});
    (*out)[at].extra_state = ExtraStateObject((*out)[at].tensor.key, axes, ExpertTpReplicated());
  }

  void Expert(int local_index) {
    const int local_experts = cfg.num_experts / pc.ep;
    const int e = c.ep * local_experts + local_index;
    const int64_t h = cfg.hidden, f = MoeFfnHidden(cfg);
    const std::string p = "mlp.experts.local_experts." + Str(local_index) + ".";
    const bool bias = cfg.add_bias_linear;
    const int64_t fc1_rows = cfg.swiglu ? 2 * f : f;
    const size_t fc1_at = out->size();
    ColumnParallel(Key("linear_fc1.weight"), p + "linear_fc1.weight", {fc1_rows, h}, cfg.swiglu, e);
    AttachExtraState(fc1_at, e);
    if (bias)
      ColumnParallel(Key("linear_fc1.bias"), p + "linear_fc1.bias", {fc1_rows}, cfg.swiglu, e);
    const Shape fc2_local = {h, f / pc.tp};
    const size_t fc2_at = out->size();
    Emit(Key("linear_fc2.weight"), p + "linear_fc2.weight", {h, f}, {0, c.tp * (f / pc.tp)},
         fc2_local, ExpertSplit(), fc2_local, 0, e);
    AttachExtraState(fc2_at, e);
    if (bias)
      Emit(Key("linear_fc2.bias"), p + "linear_fc2.bias", {h}, {0}, {h}, ExpertTpReplicated(), {h},
           0, e);
  }
};

}  // namespace

int64_t MoeFfnHidden(const GptConfig& cfg) {
  return cfg.moe_ffn_hidden > 0 ? cfg.moe_ffn_hidden : cfg.ffn_hidden;
}

Status CheckMoe(const GptConfig& cfg, const ParallelConfig& pc) {
  if (cfg.num_experts < 0 || cfg.moe_ffn_hidden < 0)
    return Status::InvalidArgument("GptConfig: num_experts=" + Str(cfg.num_experts) +
                                   " and moe_ffn_hidden=" + Str(cfg.moe_ffn_hidden) +
                                   " must be >= 0");
  if (cfg.num_experts == 0) return Status::Ok();
  if (cfg.num_experts % pc.ep != 0)
    return Status::InvalidArgument("num_experts=" + Str(cfg.num_experts) +
                                   " is not divisible by ep=" + Str(pc.ep));
  if (MoeFfnHidden(cfg) % pc.tp != 0)
    return Status::InvalidArgument("moe_ffn_hidden=" + Str(MoeFfnHidden(cfg)) +
                                   " is not divisible by tp=" + Str(pc.tp) +
                                   " (expert TP equals TP)");
  return Status::Ok();
}

void AppendMoeMlpShards(const GptConfig& cfg, const ParallelConfig& pc, const RankCoords& coords,
                        const MoeLayerPlace& place, std::vector<GptShard>* out) {
  MoeEmitter m{cfg, pc, coords, place, out};
  // The router is a dense parameter, replicated over TP like a norm.
  const Shape router = {cfg.num_experts, cfg.hidden};
  m.Emit("mlp.router.weight", "mlp.router.weight", router, {0, 0}, router,
         {0, coords.tp, DpCpRank(pc, coords)}, router, 0, /*expert=*/-1);
  for (int i = 0; i < cfg.num_experts / pc.ep; ++i) m.Expert(i);
}

bool IsExpertParam(std::string_view param_name) {
  return param_name.find(".mlp.experts.") != std::string_view::npos;
}

void MoeConfigToJson(const GptConfig& cfg, nlohmann::json* j) {
  (*j)["num_experts"] = cfg.num_experts;
  (*j)["moe_ffn_hidden"] = cfg.moe_ffn_hidden;
  (*j)["expert_keys"] = cfg.expert_keys == GptConfig::ExpertKeys::kMcore ? "mcore" : "legacy";
}

Status MoeConfigFromJson(const nlohmann::json& j, GptConfig* cfg) {
  try {
    cfg->num_experts = j.value("num_experts", 0);
    cfg->moe_ffn_hidden = j.value("moe_ffn_hidden", int64_t{0});
    // Checkpoints written before MCore's names were adopted record no style.
    const std::string keys = j.value("expert_keys", std::string("legacy"));
    if (keys != "mcore" && keys != "legacy")
      return Status::InvalidArgument("GPT config: expert_keys='" + keys + "' (known: mcore, legacy)");
    cfg->expert_keys = keys == "mcore" ? GptConfig::ExpertKeys::kMcore : GptConfig::ExpertKeys::kLegacy;
  } catch (const std::exception& e) {
    return Status::InvalidArgument(std::string("bad MoE fields in GPT config: ") + e.what());
  }
  if (cfg->num_experts < 0 || cfg->moe_ffn_hidden < 0)
    return Status::InvalidArgument("GPT config: num_experts and moe_ffn_hidden must be >= 0");
  return Status::Ok();
}

}  // namespace ckpt::reshard
