// Hugging Face Llama <-> Megatron-Core GPT: the config and the tensor mapping.
//
// Supported: LlamaForCausalLM (config.json "architectures"; model_type
// "llama"): RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP
// (hidden_act "silu"), no attention/MLP biases, tied or untied embeddings.
// config.json fields read: num_attention_heads, num_key_value_heads (default:
// num_attention_heads), hidden_size, intermediate_size, num_hidden_layers,
// vocab_size, tie_word_embeddings (LlamaConfig's default false), rms_norm_eps,
// rope_theta, head_dim (default hidden_size / num_attention_heads),
// torch_dtype (or transformers' newer "dtype"), attention_bias, mlp_bias,
// hidden_act. A rope_scaling other than null / "default" is refused
// (kInvalidArgument): Megatron's GPT config here has no RoPE scaling, so the
// converted model would compute other positions. The rest do not change the
// weights' layout and are kept as they are (HfModel::config) for the way back.
//
// The mapping (Megatron-LM tools/checkpoint, Megatron-Bridge's LlamaBridge):
//  - model.embed_tokens.weight -> embedding.word_embeddings.weight (vocab rows
//    padded with zeros by the target layout), lm_head.weight ->
//    output_layer.weight (absent when tied), model.norm.weight ->
//    decoder.final_layernorm.weight;
//  - model.layers.L.input_layernorm.weight ->
//    decoder.layers.L.self_attention.linear_qkv.layer_norm_weight,
//    post_attention_layernorm -> mlp.linear_fc1.layer_norm_weight (MCore's
//    keys; the legacy "input_layernorm" / "pre_mlp_layernorm" keys of older
//    ckpt checkpoints per GptConfig::norm_keys), self_attn.o_proj ->
//    self_attention.linear_proj, mlp.down_proj -> mlp.linear_fc2;
//  - q_proj/k_proj/v_proj -> self_attention.linear_qkv, rows interleaved per
//    query group g: [the np/ng query heads of g; k head g; v head g];
//  - gate_proj/up_proj -> mlp.linear_fc1 = [gate; up] (MCore's W; V: silu(xW) * xV).
// No rotary permutation: HF Llama weights use the rotate-half convention,
// which is MCore's default (rotary_interleaved=False) and what
// examples/torch_gpt computes; the test oracle checks it.
//
// Pure functions; thread-safe. Errors: kInvalidArgument naming config.json
// and the field (an unsupported architecture names the supported one).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/base/status.h"
#include "reshard/megatron_gpt.h"

namespace ckpt::convert {

struct HfModel {
  reshard::GptConfig gpt;  // layout fields filled from config.json
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  nlohmann::json config;   // config.json as read
};

inline constexpr const char* kSupportedArchitecture = "LlamaForCausalLM";

// `dtype_hint`: used when config.json names no dtype (the embedding's dtype).
Result<HfModel> ParseHfLlamaConfig(const nlohmann::json& config, const std::string& path, DType dtype_hint);
// config.json for `gpt` (with `base`'s other fields when given, e.g. the
// hf_config recorded at import), rms_norm_eps / rope_theta when base lacks them.
nlohmann::json HfLlamaConfigJson(const reshard::GptConfig& gpt, const nlohmann::json& base, double rms_norm_eps,
                                 double rope_theta);
// Dense SwiGLU GPT without biases and MoE: what the Llama mapping can express.
Status CheckLlamaShaped(const reshard::GptConfig& gpt);
// "bfloat16" / "float32" / "float16" for a dtype.
std::string TorchDtypeName(DType t);

// A run of rows of one MCore tensor that are rows of one HF tensor.
struct RowRun {
  int64_t hf_row = 0;
  int64_t mcore_row = 0;
  int64_t rows = 0;
};

// One HF tensor and where its rows live in the MCore state (1-D tensors: one
// element per row).
struct TensorLink {
  std::string hf_name;
  Shape hf_shape;
  std::string mcore_key;  // the checkpoint key (stacked or per layer, as gpt says)
  int layer = -1;         // index on the stacked layer axis, -1 when not stacked
  std::vector<RowRun> runs;
};

// Every HF tensor of the model, in HF's state-dict order.
std::vector<TensorLink> LlamaLinks(const reshard::GptConfig& gpt);

}  // namespace ckpt::convert
