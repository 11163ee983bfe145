// Hugging Face Llama config and tensor mapping (see hf_llama.h).
#include "ckpt/convert/hf_llama.h"

namespace ckpt::convert {
namespace {

using nlohmann::json;

std::string Str(int64_t v) { return std::to_string(v); }

// A positive integer field (or `fallback` when absent and fallback > 0).
Result<int64_t> PositiveField(const json& c, const char* name, int64_t fallback, const std::string& path) {
  if (!c.contains(name) || c[name].is_null()) {
    if (fallback > 0) return fallback;
    return Status::InvalidArgument("config.json '" + path + "': field \"" + name + "\" is missing");
  }
  if (!c[name].is_number_integer() || c[name].get<int64_t>() <= 0)
    return Status::InvalidArgument("config.json '" + path + "': \"" + name + "\" = " + c[name].dump() +
                                   " is not a positive integer");
  return c[name].get<int64_t>();
}

Status CheckArchitecture(const json& c, const std::string& path) {
  const json archs = c.value("architectures", json::array());
  const std::string type = c.value("model_type", std::string());
  bool llama = false;
  if (archs.is_array())
    for (const json& a : archs) llama = llama || (a.is_string() && a.get<std::string>() == kSupportedArchitecture);
  if (llama && (type.empty() || type == "llama")) return Status::Ok();
  return Status::InvalidArgument("config.json '" + path + "': architecture " + archs.dump() + " (model_type \"" +
                                 type + "\") is not supported; supported: " + kSupportedArchitecture +
                                 " (model_type \"llama\": RMSNorm, RoPE, GQA, SwiGLU, no biases)");
}

// RoPE scaling (Llama 3.1's "llama3", "linear", "dynamic", "yarn", ...)
// changes the positions the model computes. ckpt's GPT config has no field for
// it and Megatron's plain RoPE ignores it, so converting would silently give
// another model: refused, naming it. Absent, null or type "default" is plain RoPE.
Status CheckRopeScaling(const json& c, const std::string& path) {
  if (!c.contains("rope_scaling") || c["rope_scaling"].is_null()) return Status::Ok();
  const json& rs = c["rope_scaling"];
  std::string type;
  for (const char* field : {"rope_type", "type"})
    if (type.empty() && rs.is_object() && rs.contains(field) && rs[field].is_string()) type = rs[field].get<std::string>();
  if (type == "default") return Status::Ok();
  return Status::InvalidArgument("config.json '" + path + "': rope_scaling " + rs.dump() +
                                 " is not supported: ckpt converts plain RoPE only (rope_theta), so the converted "
                                 "model would compute other positions; convert a model without rope_scaling");
}

Status CheckFunctionFields(const json& c, const std::string& path) {
  const std::string act = c.value("hidden_act", std::string("silu"));
  if (act != "silu")
    return Status::InvalidArgument("config.json '" + path + "': hidden_act \"" + act + "\" is not supported (Llama's SwiGLU needs \"silu\")");
  for (const char* bias : {"attention_bias", "mlp_bias"})
    if (c.value(bias, false))
      return Status::InvalidArgument("config.json '" + path + "': " + bias + "=true is not supported (Llama without biases only)");
  return CheckRopeScaling(c, path);
}

Result<DType> ConfigDtype(const json& c, const std::string& path, DType hint) {
  const char* field = c.contains("torch_dtype") ? "torch_dtype" : c.contains("dtype") ? "dtype" : nullptr;
  if (!field || c[field].is_null()) return hint;
  const std::string name = c[field].is_string() ? c[field].get<std::string>() : c[field].dump();
  if (name == "bfloat16") return DType::kBFloat16;
  if (name == "float32") return DType::kFloat32;
  if (name == "float16") return DType::kFloat16;
  return Status::InvalidArgument("config.json '" + path + "': " + field + " \"" + name +
                                 "\" is not supported (bfloat16, float32, float16)");
}

// [q heads of group g; k head g; v head g] for every query group g.
std::vector<RowRun> QkvRuns(const reshard::GptConfig& g, int which /*0 q, 1 k, 2 v*/) {
  const int64_t hn = g.head_dim(), ng = g.query_groups(), qpg = g.num_heads / ng, group_rows = (qpg + 2) * hn;
  std::vector<RowRun> runs;
  for (int64_t grp = 0; grp < ng; ++grp) {
    if (which == 0) runs.push_back({grp * qpg * hn, grp * group_rows, qpg * hn});
    if (which == 1) runs.push_back({grp * hn, grp * group_rows + qpg * hn, hn});
    if (which == 2) runs.push_back({grp * hn, grp * group_rows + (qpg + 1) * hn, hn});
  }
  return runs;
}

struct LinkBuilder {
  const reshard::GptConfig& g;
  std::vector<TensorLink> out;

  // A layer tensor: key per layer or stacked.
  void Layer(int layer, const std::string& hf, Shape shape, const std::string& mcore, std::vector<RowRun> runs) {
    TensorLink t{"model.layers." + Str(layer) + "." + hf, std::move(shape), "", -1, std::move(runs)};
    t.mcore_key = g.stack_layers ? "decoder.layers." + mcore : "decoder.layers." + Str(layer) + "." + mcore;
    t.layer = g.stack_layers ? layer : -1;
    out.push_back(std::move(t));
  }
  void Whole(int layer, const std::string& hf, Shape shape, const std::string& mcore) {
    const int64_t rows = shape[0];
    Layer(layer, hf, std::move(shape), mcore, {{0, 0, rows}});
  }
};

}  // namespace

std::string TorchDtypeName(DType t) {
  switch (t) {
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kFloat64: return "float64";
    default: return "float32";
  }
}

Result<HfModel> ParseHfLlamaConfig(const json& c, const std::string& path, DType dtype_hint) {
  if (!c.is_object()) return Status::InvalidArgument("config.json '" + path + "' is not a JSON object");
  CKPT_RETURN_IF_ERROR(CheckArchitecture(c, path));
  CKPT_RETURN_IF_ERROR(CheckFunctionFields(c, path));
  HfModel m;
  m.config = c;
  reshard::GptConfig& g = m.gpt;
  CKPT_ASSIGN_OR_RETURN(g.hidden, PositiveField(c, "hidden_size", 0, path));
  CKPT_ASSIGN_OR_RETURN(int64_t heads, PositiveField(c, "num_attention_heads", 0, path));
  CKPT_ASSIGN_OR_RETURN(int64_t kv, PositiveField(c, "num_key_value_heads", heads, path));
  CKPT_ASSIGN_OR_RETURN(int64_t layers, PositiveField(c, "num_hidden_layers", 0, path));
  CKPT_ASSIGN_OR_RETURN(g.ffn_hidden, PositiveField(c, "intermediate_size", 0, path));
  CKPT_ASSIGN_OR_RETURN(g.vocab_size, PositiveField(c, "vocab_size", 0, path));
  const int64_t default_head_dim = g.hidden % heads == 0 ? g.hidden / heads : 0;
  CKPT_ASSIGN_OR_RETURN(int64_t head_dim, PositiveField(c, "head_dim", default_head_dim, path));
  g.num_heads = int(heads);
  g.num_query_groups = int(kv);
  g.num_layers = int(layers);
  g.kv_channels = head_dim == default_head_dim ? 0 : head_dim;
  if (g.kv_channels == 0 && default_head_dim == 0) g.kv_channels = head_dim;
  g.swiglu = true;
  g.tied_embeddings = c.value("tie_word_embeddings", false);
  CKPT_ASSIGN_OR_RETURN(g.dtype, ConfigDtype(c, path, dtype_hint));
  if (c.contains("rms_norm_eps") && c["rms_norm_eps"].is_number()) m.rms_norm_eps = c["rms_norm_eps"].get<double>();
  if (c.contains("rope_theta") && c["rope_theta"].is_number()) m.rope_theta = c["rope_theta"].get<double>();
  if (heads % kv != 0)
    return Status::InvalidArgument("config.json '" + path + "': num_attention_heads=" + Str(heads) +
                                   " is not a multiple of num_key_value_heads=" + Str(kv));
  Status st = g.Validate();
  if (!st.ok()) return st.WithContext("config.json '" + path + "'");
  return m;
}

json HfLlamaConfigJson(const reshard::GptConfig& g, const json& base, double rms_norm_eps, double rope_theta) {
  json c = base.is_object() ? base : json::object();
  c["architectures"] = {kSupportedArchitecture};
  c["model_type"] = "llama";
  c["hidden_size"] = g.hidden;
  c["intermediate_size"] = g.ffn_hidden;
  c["num_attention_heads"] = g.num_heads;
  c["num_key_value_heads"] = g.query_groups();
  c["num_hidden_layers"] = g.num_layers;
  c["vocab_size"] = g.vocab_size;
  c["head_dim"] = g.head_dim();
  c["tie_word_embeddings"] = g.tied_embeddings;
  c["torch_dtype"] = TorchDtypeName(g.dtype);
  c["hidden_act"] = "silu";
  c["attention_bias"] = false;
  c["mlp_bias"] = false;
  if (!c.contains("rms_norm_eps")) c["rms_norm_eps"] = rms_norm_eps;
  if (!c.contains("rope_theta")) c["rope_theta"] = rope_theta;
  return c;
}

Status CheckLlamaShaped(const reshard::GptConfig& g) {
  std::string why;
  if (!g.swiglu) why = "no SwiGLU";
  if (g.add_bias_linear || g.qkv_bias) why = "linear biases";
  if (g.num_experts > 0) why = "mixture of experts (" + Str(g.num_experts) + " experts)";
  if (why.empty()) return Status::Ok();
  return Status::Unimplemented("this GPT has " + why + "; the Hugging Face mapping supports " +
                               kSupportedArchitecture + "-shaped models only (dense SwiGLU, no biases)");
}

std::vector<TensorLink> LlamaLinks(const reshard::GptConfig& g) {
  LinkBuilder b{g, {}};
  const int64_t h = g.hidden, f = g.ffn_hidden, hn = g.head_dim(), q = g.num_heads * hn, kv = g.query_groups() * hn;
  b.out.push_back({"model.embed_tokens.weight", {g.vocab_size, h}, "embedding.word_embeddings.weight", -1,
                   {{0, 0, g.vocab_size}}});
  for (int l = 0; l < g.num_layers; ++l) {  // HF's module order inside a layer
    b.Layer(l, "self_attn.q_proj.weight", {q, h}, "self_attention.linear_qkv.weight", QkvRuns(g, 0));
    b.Layer(l, "self_attn.k_proj.weight", {kv, h}, "self_attention.linear_qkv.weight", QkvRuns(g, 1));
    b.Layer(l, "self_attn.v_proj.weight", {kv, h}, "self_attention.linear_qkv.weight", QkvRuns(g, 2));
    b.Whole(l, "self_attn.o_proj.weight", {h, q}, "self_attention.linear_proj.weight");
    b.Layer(l, "mlp.gate_proj.weight", {f, h}, "mlp.linear_fc1.weight", {{0, 0, f}});
    b.Layer(l, "mlp.up_proj.weight", {f, h}, "mlp.linear_fc1.weight", {{0, f, f}});
    b.Whole(l, "mlp.down_proj.weight", {h, f}, "mlp.linear_fc2.weight");
    b.Whole(l, "input_layernorm.weight", {h}, reshard::LayerNormKeyName(g, reshard::LayerNorm::kInput));
    b.Whole(l, "post_attention_layernorm.weight", {h}, reshard::LayerNormKeyName(g, reshard::LayerNorm::kPreMlp));
  }
  b.out.push_back({"model.norm.weight", {h}, "decoder.final_layernorm.weight", -1, {{0, 0, h}}});
  if (!g.tied_embeddings)
    b.out.push_back({"lm_head.weight", {g.vocab_size, h}, "output_layer.weight", -1, {{0, 0, g.vocab_size}}});
  return b.out;
}

}  // namespace ckpt::convert
