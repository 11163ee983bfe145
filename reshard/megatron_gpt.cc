// GPT sharded state with Megatron-Core layouts (see megatron_gpt.h for the rules).
#include "reshard/megatron_gpt.h"

#include <numeric>

#include "reshard/megatron_moe.h"

namespace ckpt::reshard {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }

// Everything the per-tensor helpers need about the rank being described.
struct Builder {
  const GptConfig& cfg;
  const ParallelConfig& pc;
  const RankCoords& c;
  bool naive_fc1;
  std::vector<GptShard> out;

  ReplicaId Split() const { return {0, 0, DpCpRank(pc, c)}; }
  ReplicaId Replicated() const { return {0, c.tp, DpCpRank(pc, c)}; }
};

// Where a tensor goes: its key and, for stacked layers, the prepended layer axis.
struct Place {
  std::string key;
  std::string param;
  int stacked_layer = -1;  // global layer index when stacked, else -1
};

// Registers one shard. `global`/`offset`/`local` describe the unstacked tensor.
void Emit(Builder& b, const Place& p, Shape global, Shape offset, Shape local, ReplicaId rep,
          Shape param_shape, int64_t param_offset, bool allow_mismatch = false) {
  if (p.stacked_layer >= 0) {
    global.insert(global.begin(), b.cfg.num_layers);
    offset.insert(offset.begin(), p.stacked_layer);
    local.insert(local.begin(), 1);
  }
  ShardedTensor t;
  t.key = p.key;
  t.dtype = b.cfg.dtype;
  t.global_shape = std::move(global);
  t.global_offset = std::move(offset);
  t.local_shape = std::move(local);
  t.replica_id = std::move(rep);
  t.allow_shape_mismatch = allow_mismatch;
  b.out.push_back({std::move(t), p.param, std::move(param_shape), param_offset, std::nullopt});
}

// Splits `global` on `axis` over TP; the local parameter is exactly the slice.
void EmitTpSplit(Builder& b, const Place& p, const Shape& global, size_t axis,
                 bool allow_mismatch = false) {
  Shape local = global;
  local[axis] /= b.pc.tp;
  Shape offset(global.size(), 0);
  offset[axis] = b.c.tp * local[axis];
  Emit(b, p, global, offset, local, b.Split(), local, 0, allow_mismatch);
}

void EmitReplicated(Builder& b, const Place& p, const Shape& shape) {
  Emit(b, p, shape, Shape(shape.size(), 0), shape, b.Replicated(), shape, 0);
}

// SwiGLU fc1 (weight [2*ffn, h] or bias [2*ffn]): the local [W_r; V_r] is two
// shards of one key, W_r at row block r and V_r at block tp + r of 2*tp.
void EmitSwiglu(Builder& b, const Place& p, const Shape& global) {
  if (b.naive_fc1) return EmitTpSplit(b, p, global, 0);
  const int64_t half = global[0] / 2 / b.pc.tp;  // ffn / tp rows
  Shape local = global;
  local[0] = half;
  Shape param_shape = global;
  param_shape[0] = 2 * half;
  const int64_t half_elems = NumElements(local);
  Shape w_off(global.size(), 0), v_off(global.size(), 0);
  w_off[0] = b.c.tp * half;
  v_off[0] = (b.pc.tp + b.c.tp) * half;
  Emit(b, p, global, w_off, local, b.Split(), param_shape, 0);
  Emit(b, p, global, v_off, local, b.Split(), param_shape, half_elems);
}

// Attaches MCore's "<module>._extra_state" object to the shard at `at` (the
// linear layer's weight, its first shard) when the config asks for it.
void AttachExtraState(Builder& b, size_t at, const Place& p) {
  if (!b.cfg.extra_state) return;
  std::vector<std::pair<int64_t, int64_t>> axes;
  if (p.stacked_layer >= 0) axes.push_back({p.stacked_layer, b.cfg.num_layers});
  b.out[at].extra_state = ExtraStateObject(p.key, axes, b.Replicated());
}

void EmitLayer(Builder& b, const std::string& chunk_prefix, int local_index, int global_layer) {
  const GptConfig& cfg = b.cfg;
  const int64_t h = cfg.hidden, ffn = cfg.ffn_hidden;
  // `name`: the local module's parameter; `key_name`: its key when it differs.
  auto place = [&](const std::string& name, const std::string& key_name = "") {
    const std::string& k = key_name.empty() ? name : key_name;
    Place p;
    p.param = chunk_prefix + "decoder.layers." + Str(local_index) + "." + name;
    if (cfg.stack_layers) {
      p.key = "decoder.layers." + k;
      p.stacked_layer = global_layer;
    } else {
      p.key = "decoder.layers." + Str(global_layer) + "." + k;
    }
    return p;
  };
  // A linear layer's weight: emitted by `emit`, then its module's extra state.
  auto linear = [&](const std::string& name, auto emit) {
    const size_t at = b.out.size();
    const Place p = place(name);
    emit(p);
    AttachExtraState(b, at, p);
  };
  const bool bias = cfg.add_bias_linear;
  EmitReplicated(b, place("input_layernorm.weight", LayerNormKeyName(cfg, LayerNorm::kInput)), {h});
  linear("self_attention.linear_qkv.weight",
         [&](const Place& p) { EmitTpSplit(b, p, {cfg.qkv_rows(), h}, 0); });
  if (bias || cfg.qkv_bias)
    EmitTpSplit(b, place("self_attention.linear_qkv.bias"), {cfg.qkv_rows()}, 0);
  linear("self_attention.linear_proj.weight",
         [&](const Place& p) { EmitTpSplit(b, p, {h, cfg.num_heads * cfg.head_dim()}, 1); });
  if (bias) EmitReplicated(b, place("self_attention.linear_proj.bias"), {h});
  EmitReplicated(b, place("pre_mlp_layernorm.weight", LayerNormKeyName(cfg, LayerNorm::kPreMlp)), {h});
  if (cfg.num_experts > 0) {
    const std::string key_prefix =
        cfg.stack_layers ? "decoder.layers." : "decoder.layers." + Str(global_layer) + ".";
    AppendMoeMlpShards(cfg, b.pc, b.c,
                       {chunk_prefix + "decoder.layers." + Str(local_index) + ".", key_prefix,
                        cfg.stack_layers ? global_layer : -1},
                       &b.out);
    return;
  }
  if (cfg.swiglu) {
    linear("mlp.linear_fc1.weight", [&](const Place& p) { EmitSwiglu(b, p, {2 * ffn, h}); });
    if (bias) EmitSwiglu(b, place("mlp.linear_fc1.bias"), {2 * ffn});
  } else {
    linear("mlp.linear_fc1.weight", [&](const Place& p) { EmitTpSplit(b, p, {ffn, h}, 0); });
    if (bias) EmitTpSplit(b, place("mlp.linear_fc1.bias"), {ffn}, 0);
  }
  linear("mlp.linear_fc2.weight", [&](const Place& p) { EmitTpSplit(b, p, {h, ffn}, 1); });
  if (bias) EmitReplicated(b, place("mlp.linear_fc2.bias"), {h});
}

// The output side of the last chunk of the last stage.
void EmitOutput(Builder& b, const std::string& chunk_prefix, bool has_embedding) {
  const Shape vocab = {PaddedVocabSize(b.cfg, b.pc.tp), b.cfg.hidden};
  EmitReplicated(
      b, {"decoder.final_layernorm.weight", chunk_prefix + "decoder.final_layernorm.weight"},
      {b.cfg.hidden});
  if (!b.cfg.tied_embeddings) {
    EmitTpSplit(b, {"output_layer.weight", chunk_prefix + "output_layer.weight"}, vocab, 0, true);
    return;
  }
  if (has_embedding) return;  // pp == 1: the embedding is the output weight, registered once
  // MCore tie_embeddings_and_output_weights_state_dict: a copy of the first
  // stage's embedding, never the main replica.
  Shape local = {vocab[0] / b.pc.tp, vocab[1]};
  Emit(b, {"embedding.word_embeddings.weight", chunk_prefix + "output_layer.weight"}, vocab,
       {b.c.tp * local[0], 0}, local, {1, 0, DpCpRank(b.pc, b.c)}, local, 0, true);
}

Status CheckTp(const GptConfig& cfg, const ParallelConfig& pc) {
  auto need = [&](int64_t v, const char* what) -> Status {
    if (v % pc.tp == 0) return Status::Ok();
    return Status::InvalidArgument(std::string(what) + "=" + Str(v) +
                                   " is not divisible by tp=" + Str(pc.tp));
  };
  CKPT_RETURN_IF_ERROR(need(cfg.num_heads, "num_heads"));
  CKPT_RETURN_IF_ERROR(
      need(cfg.query_groups(), "num_query_groups (GQA rows per TP rank are whole query groups)"));
  return need(cfg.ffn_hidden, "ffn_hidden");
}

Result<std::vector<GptShard>> BuildShards(const GptConfig& cfg, const ParallelConfig& pc,
                                          const RankCoords& coords, bool naive_fc1) {
  CKPT_RETURN_IF_ERROR(cfg.Validate());
  CKPT_RETURN_IF_ERROR(RankOf(pc, coords).status());
  CKPT_RETURN_IF_ERROR(CheckTp(cfg, pc));
  CKPT_RETURN_IF_ERROR(CheckMoe(cfg, pc));
  CKPT_ASSIGN_OR_RETURN(std::vector<LayerSpan> spans, StageLayerSpans(cfg, pc, coords.pp));
  Builder b{cfg, pc, coords, naive_fc1, {}};
  for (int v = 0; v < pc.vpp; ++v) {
    const std::string prefix = pc.vpp > 1 ? "model" + Str(v) + "." : "";
    const bool first = coords.pp == 0 && v == 0;
    const bool last = coords.pp == pc.pp - 1 && v == pc.vpp - 1;
    if (first)
      EmitTpSplit(b,
                  {"embedding.word_embeddings.weight", prefix + "embedding.word_embeddings.weight"},
                  {PaddedVocabSize(cfg, pc.tp), cfg.hidden}, 0, true);
    for (int i = 0; i < spans[v].count; ++i) EmitLayer(b, prefix, i, spans[v].first + i);
    if (last) EmitOutput(b, prefix, first);
  }
  return std::move(b.out);
}

}  // namespace

ShardedObject ExtraStateObject(const std::string& weight_key,
                               const std::vector<std::pair<int64_t, int64_t>>& prefix_axes,
                               ReplicaId replica) {
  constexpr std::string_view kWeight = ".weight";
  std::string key = weight_key;
  if (key.size() >= kWeight.size() && key.compare(key.size() - kWeight.size(), kWeight.size(), kWeight) == 0)
    key.resize(key.size() - kWeight.size());
  key += "._extra_state";
  ShardedObject o;
  o.key = std::move(key);
  for (const auto& [offset, size] : prefix_axes) {
    o.global_offset.push_back(offset);
    o.global_shape.push_back(size);
  }
  if (prefix_axes.empty()) o = {o.key, {1}, {0}, {}};  // MCore _get_extra_state_offsets
  o.replica_id = std::move(replica);
  return o;
}

std::string LayerNormKeyName(const GptConfig& cfg, LayerNorm which) {
  using K = GptConfig::NormKeys;
  if (cfg.norm_keys == K::kLegacy)
    return which == LayerNorm::kInput ? "input_layernorm.weight" : "pre_mlp_layernorm.weight";
  if (which == LayerNorm::kInput) return "self_attention.linear_qkv.layer_norm_weight";
  // MoE with the TE spec: a separate TENorm (no fused linear_fc1 to hold it).
  if (cfg.num_experts > 0 && cfg.norm_keys == K::kTe) return "pre_mlp_layernorm.weight";
  return "mlp.linear_fc1.layer_norm_weight";
}

std::string_view NormKeysName(GptConfig::NormKeys k) {
  switch (k) {
    case GptConfig::NormKeys::kTe: return "te";
    case GptConfig::NormKeys::kLocal: return "local";
    case GptConfig::NormKeys::kLegacy: return "legacy";
  }
  return "?";
}

Result<GptConfig::NormKeys> ParseNormKeys(std::string_view name) {
  for (auto k : {GptConfig::NormKeys::kTe, GptConfig::NormKeys::kLocal, GptConfig::NormKeys::kLegacy})
    if (name == NormKeysName(k)) return k;
  return Status::InvalidArgument("GPT config: norm_keys='" + std::string(name) + "' (known: te, local, legacy)");
}

int64_t GptConfig::qkv_rows() const {
  return int64_t(query_groups()) * (num_heads / query_groups() + 2) * head_dim();
}

Status GptConfig::Validate() const {
  auto positive = [](int64_t v, const char* what) -> Status {
    if (v > 0) return Status::Ok();
    return Status::InvalidArgument(std::string("GptConfig: ") + what + "=" + Str(v) +
                                   " must be positive");
  };
  CKPT_RETURN_IF_ERROR(positive(vocab_size, "vocab_size"));
  CKPT_RETURN_IF_ERROR(positive(hidden, "hidden"));
  CKPT_RETURN_IF_ERROR(positive(ffn_hidden, "ffn_hidden"));
  CKPT_RETURN_IF_ERROR(positive(num_layers, "num_layers"));
  CKPT_RETURN_IF_ERROR(positive(num_heads, "num_heads"));
  CKPT_RETURN_IF_ERROR(positive(make_vocab_size_divisible_by, "make_vocab_size_divisible_by"));
  if (num_query_groups < 0 || num_heads % query_groups() != 0)
    return Status::InvalidArgument(
        "GptConfig: num_heads=" + Str(num_heads) +
        " must be a multiple of num_query_groups=" + Str(num_query_groups));
  if (kv_channels < 0 || (kv_channels == 0 && hidden % num_heads != 0))
    return Status::InvalidArgument("GptConfig: kv_channels=" + Str(kv_channels) +
                                   " invalid (0 needs hidden % num_heads == 0)");
  // Upper bounds keep every shape product of GptShards inside int64 (a
  // config may come from an untrusted checkpoint's metadata).
  auto at_most = [](int64_t v, int64_t hi, const char* what) -> Status {
    if (v <= hi) return Status::Ok();
    return Status::InvalidArgument(std::string("GptConfig: ") + what + "=" + Str(v) + " exceeds " + Str(hi));
  };
  CKPT_RETURN_IF_ERROR(at_most(vocab_size, int64_t(1) << 31, "vocab_size"));
  CKPT_RETURN_IF_ERROR(at_most(hidden, int64_t(1) << 20, "hidden"));
  CKPT_RETURN_IF_ERROR(at_most(ffn_hidden, int64_t(1) << 22, "ffn_hidden"));
  CKPT_RETURN_IF_ERROR(at_most(moe_ffn_hidden, int64_t(1) << 22, "moe_ffn_hidden"));
  CKPT_RETURN_IF_ERROR(at_most(num_layers, int64_t(1) << 16, "num_layers"));
  CKPT_RETURN_IF_ERROR(at_most(num_heads, int64_t(1) << 14, "num_heads"));
  CKPT_RETURN_IF_ERROR(at_most(kv_channels, int64_t(1) << 16, "kv_channels"));
  CKPT_RETURN_IF_ERROR(at_most(num_experts, int64_t(1) << 12, "num_experts"));
  CKPT_RETURN_IF_ERROR(at_most(make_vocab_size_divisible_by, int64_t(1) << 20, "make_vocab_size_divisible_by"));
  if (first_stage_layers < -1 || last_stage_layers < -1)
    return Status::InvalidArgument("GptConfig: first/last_stage_layers must be -1 (unset) or >= 0");
  return Status::Ok();
}

Result<GptConfig> GptPreset(std::string_view name) {
  GptConfig c;
  if (name == "tiny") {
    c.vocab_size = 1100;  // pads to 1152 / 1280 / 1536 / 2048 at tp 1 / 2 / 4 / 8
    c.hidden = 64;
    c.ffn_hidden = 128;
    c.num_layers = 8;
    c.num_heads = 16;
    c.num_query_groups = 8;
    return c;
  }
  if (name == "demo") {
    c.vocab_size = 32000;
    c.hidden = 2048;
    c.ffn_hidden = 5632;
    c.num_layers = 8;
    c.num_heads = 16;
    c.num_query_groups = 8;
    return c;
  }
  if (name == "llama70b" || name == "llama405b") {  // for plan simulation: never materialised here
    const bool big = name == "llama405b";
    c.vocab_size = 128256;
    c.hidden = big ? 16384 : 8192;
    c.ffn_hidden = big ? 53248 : 28672;
    c.num_layers = big ? 126 : 80;
    c.num_heads = big ? 128 : 64;
    c.num_query_groups = 8;
    return c;
  }
  return Status::InvalidArgument("unknown GPT preset '" + std::string(name) +
                                 "' (known: tiny, demo, llama70b, llama405b)");
}

int64_t PaddedVocabSize(const GptConfig& cfg, int tp) {
  const int64_t multiple = cfg.make_vocab_size_divisible_by * tp;
  return (cfg.vocab_size + multiple - 1) / multiple * multiple;
}

Result<std::vector<LayerSpan>> StageLayerSpans(const GptConfig& cfg, const ParallelConfig& pc,
                                               int pp_rank) {
  CKPT_RETURN_IF_ERROR(pc.Validate());
  if (pp_rank < 0 || pp_rank >= pc.pp)
    return Status::InvalidArgument("pp rank " + Str(pp_rank) + " outside [0, " + Str(pc.pp) + ")");
  const bool has_first = cfg.first_stage_layers >= 0, has_last = cfg.last_stage_layers >= 0;
  if ((has_first || has_last) && pc.pp == 1)
    return Status::InvalidArgument("first/last_stage_layers need pp > 1");
  const int middle_stages = pc.pp - int(has_first) - int(has_last);
  const int middle =
      cfg.num_layers - std::max(cfg.first_stage_layers, 0) - std::max(cfg.last_stage_layers, 0);
  if (middle < 0 || (middle_stages == 0 && middle != 0) ||
      (middle_stages > 0 && middle % middle_stages != 0))
    return Status::InvalidArgument("num_layers=" + Str(cfg.num_layers) +
                                   " with first_stage_layers=" + Str(cfg.first_stage_layers) +
                                   ", last_stage_layers=" + Str(cfg.last_stage_layers) +
                                   " leaves " + Str(middle) +
                                   " layers that do not split evenly over " + Str(middle_stages) +
                                   " middle stage(s) of pp=" + Str(pc.pp));
  std::vector<int> per_stage(pc.pp, middle_stages > 0 ? middle / middle_stages : 0);
  if (has_first) per_stage.front() = cfg.first_stage_layers;
  if (has_last) per_stage.back() = cfg.last_stage_layers;
  for (int p = 0; p < pc.pp; ++p)
    if (per_stage[p] % pc.vpp != 0)
      return Status::InvalidArgument("stage " + Str(p) + " has " + Str(per_stage[p]) +
                                     " layers, not divisible by vpp=" + Str(pc.vpp));
  // MCore get_transformer_layer_offset: chunk v of every stage comes after all
  // chunks v-1; within a round, stages in order.
  std::vector<int> chunk(pc.pp);
  for (int p = 0; p < pc.pp; ++p) chunk[p] = per_stage[p] / pc.vpp;
  const int round = std::accumulate(chunk.begin(), chunk.end(), 0);
  const int before = std::accumulate(chunk.begin(), chunk.begin() + pp_rank, 0);
  std::vector<LayerSpan> spans;
  for (int v = 0; v < pc.vpp; ++v) spans.push_back({v * round + before, chunk[pp_rank]});
  return spans;
}

Result<std::vector<GptShard>> GptShards(const GptConfig& cfg, const ParallelConfig& pc,
                                        const RankCoords& coords) {
  return BuildShards(cfg, pc, coords, /*naive_fc1=*/false);
}

namespace {

Result<double> ProbeBytes(GptConfig cfg, int layers) {
  cfg.num_layers = layers;
  cfg.first_stage_layers = cfg.last_stage_layers = -1;
  CKPT_ASSIGN_OR_RETURN(auto shards, GptShards(cfg, ParallelConfig{}, RankCoords{}));
  double bytes = 0;
  for (const auto& s : shards) bytes += double(NumElements(s.tensor.global_shape)) * double(DTypeSize(s.tensor.dtype));
  return bytes;
}

}  // namespace

Result<double> GptModelBytes(const GptConfig& cfg) {
  CKPT_RETURN_IF_ERROR(cfg.Validate());
  CKPT_ASSIGN_OR_RETURN(double one, ProbeBytes(cfg, 1));
  CKPT_ASSIGN_OR_RETURN(double two, ProbeBytes(cfg, 2));
  return one + (two - one) * double(cfg.num_layers - 1);
}

}  // namespace ckpt::reshard
