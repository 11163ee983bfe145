// A GPT model's sharded state with Megatron-Core layouts and key names.
//
// GptShards(config, parallel, coords) lists, for one rank, every ShardedTensor
// MCore's GPTModel.sharded_state_dict() would register (local layer spec,
// RMSNorm, RoPE: no position embedding), together with where its data lives
// in the rank's local parameter tensors. Rules (see DESIGN.md and the files
// named there):
//  - column-parallel weight/bias: axis 0 split over TP, replica (0, 0, dp_cp);
//    row-parallel weight: axis 1 split; row-parallel bias and norms are
//    TP-replicated, replica (0, tp_rank, dp_cp);
//  - fused QKV rows per TP rank are whole query groups, so the global tensor
//    [ng*(np/ng+2)*hn, h] does not depend on TP (needs ng % tp == 0, np % tp == 0);
//  - SwiGLU fc1: the local [2*ffn/tp, h] tensor is TWO ShardedTensors of one
//    key: W_r at row block r and V_r at block tp + r of the global [2*ffn, h]
//    (MCore apply_swiglu_sharded_factory); same for the fc1 bias;
//  - vocab tensors are padded to a multiple of divisible_by * tp and marked
//    allow_shape_mismatch; tied embeddings on the last stage (pp > 1) are a
//    non-main replica (1, 0, dp_cp) of embedding.word_embeddings.weight;
//  - PP/VPP: stage p, chunk v holds a contiguous layer span (MCore
//    get_transformer_layer_offset, uneven first/last stages included);
//    stacked layers share key "decoder.layers.<name>" with a prepended layer axis;
//  - MoE (num_experts > 0): router + experts instead of the dense MLP, with the
//    rules of reshard/megatron_moe.h.
// Megatron-Core fidelity options (all recorded in the checkpoint's "gpt"
// metadata, docs/DESIGN.md "Megatron-Core key fidelity"):
//  - stack_layers: MCore TransformerBlock with non_homogeneous_layers=False
//    (what Megatron-LM training writes for a homogeneous GPT) keys every layer
//    tensor "decoder.layers.<name>" with a prepended [num_layers] axis; off
//    (ckpt's default, and MCore's non_homogeneous_layers=True) keys
//    "decoder.layers.<L>.<name>";
//  - expert_keys: MCore SequentialMLP/TEGroupedMLP register expert tensors
//    under "...mlp.experts.experts.<name>" (kMcore, the default); kLegacy is the
//    "...mlp.experts.<name>" of ckpt checkpoints written before that was fixed
//    (metadata without the field reads as legacy);
//  - norm_keys: where a layer's two RMSNorm weights are keyed. MCore fuses
//    them into the next linear with the Transformer Engine spec
//    (TELayerNormColumnParallelLinear: "self_attention.linear_qkv.layer_norm_weight",
//    "mlp.linear_fc1.layer_norm_weight") and renames its local spec's separate
//    norms to the same keys (TransformerLayerSubmodules.sharded_state_dict_keys_map
//    "input_layernorm." -> "self_attention.linear_qkv.layer_norm_",
//    "pre_mlp_layernorm." -> "mlp.linear_fc1.layer_norm_",
//    megatron/core/models/gpt/gpt_layer_specs.py, get_gpt_layer_local_submodules;
//    applied by TransformerLayer.sharded_state_dict). The specs differ for MoE
//    layers only: the TE spec keeps a separate TENorm "pre_mlp_layernorm.weight",
//    the local spec's map renames it to "mlp.linear_fc1.layer_norm_weight" as
//    well. kTe (the default: Megatron-LM's --transformer-impl default), kLocal,
//    and kLegacy, the "input_layernorm.weight" / "pre_mlp_layernorm.weight" of
//    ckpt checkpoints written before (metadata without the field reads as
//    legacy). The rank-local parameter names stay the local modules' names;
//    only the keys change (and, for kTe, the DDP registration order:
//    reshard/dist_optimizer.h);
//  - extra_state: the `_extra_state` ShardedObject MCore's local-spec linear
//    layers (ColumnParallelLinear / RowParallelLinear: linear_qkv, linear_proj,
//    linear_fc1, linear_fc2, expert linears) register so that a strict load
//    finds them; GPTModel drops output_layer's. The object is attached to the
//    layer's weight shard (GptShard::extra_state); its value is empty (MCore's
//    get_extra_state returns None for these layers).
//
// Pure functions of their arguments; thread-safe. Errors are InvalidArgument
// naming the offending field.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/base/dtype.h"
#include "reshard/family.h"
#include "reshard/parallel_state.h"
#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"

namespace ckpt::reshard {

struct GptConfig {
  int64_t vocab_size = 0;
  int64_t hidden = 0;
  int64_t ffn_hidden = 0;
  int num_layers = 0;
  int num_heads = 0;         // np
  int num_query_groups = 0;  // ng; 0 = num_heads (plain multi-head attention)
  int64_t kv_channels = 0;   // hn; 0 = hidden / num_heads
  bool swiglu = true;
  bool tied_embeddings = false;
  bool add_bias_linear = false;  // biases of qkv, proj, fc1, fc2 (MCore --add-bias-linear)
  bool qkv_bias = false;         // bias of linear_qkv only (MCore --add-qkv-bias)
  int64_t make_vocab_size_divisible_by = 128;
  DType dtype = DType::kBFloat16;
  int first_stage_layers = -1;  // -1 = not set (even split)
  int last_stage_layers = -1;
  bool stack_layers = false;
  enum class ExpertKeys { kMcore, kLegacy };
  ExpertKeys expert_keys = ExpertKeys::kMcore;
  bool extra_state = false;
  enum class NormKeys { kTe, kLocal, kLegacy };
  NormKeys norm_keys = NormKeys::kTe;
  // Mixture of experts (reshard/megatron_moe.h): every layer's MLP is an MCore
  // MoELayer when num_experts > 0; moe_ffn_hidden 0 = ffn_hidden.
  int num_experts = 0;
  int64_t moe_ffn_hidden = 0;

  int query_groups() const { return num_query_groups > 0 ? num_query_groups : num_heads; }
  int64_t head_dim() const { return kv_channels > 0 ? kv_channels : hidden / num_heads; }
  // Rows of the fused QKV weight: ng * (np/ng + 2) * hn.
  int64_t qkv_rows() const;
  // Model-only checks (positive sizes, heads divisible by groups, ...).
  Status Validate() const;
};

// "tiny": 8 layers, hidden 64, np 16, ng 8, vocab 1100 (padding differs per TP),
//         for tests; TP up to 8, PP up to 8.
// "demo": ~1 GB of bf16 (495M parameters untied), 8 layers, hidden 2048, GQA.
// "llama70b" / "llama405b": Llama-3 shapes (GQA 8 groups, vocab 128256), for
//         `ckpt plan --simulate` only (70B / 405B parameters).
Result<GptConfig> GptPreset(std::string_view name);

// ceil(V / (divisible_by * tp)) * divisible_by * tp (Megatron vocab_size_with_padding).
int64_t PaddedVocabSize(const GptConfig& cfg, int tp);

// The key of a layer's norm weight, relative to "decoder.layers.<L>." (see
// GptConfig::norm_keys). "te" / "local" / "legacy" name the styles in metadata.
enum class LayerNorm { kInput, kPreMlp };
std::string LayerNormKeyName(const GptConfig& cfg, LayerNorm which);
std::string_view NormKeysName(GptConfig::NormKeys k);
Result<GptConfig::NormKeys> ParseNormKeys(std::string_view name);

// One model chunk's layers: global indices [first, first + count).
struct LayerSpan {
  int first = 0;
  int count = 0;
  bool operator==(const LayerSpan&) const = default;
};
// The vpp chunks of pipeline stage pp_rank, chunk v at index v. Fails on layer
// counts that do not split (uneven middle stages, stage count % vpp != 0).
Result<std::vector<LayerSpan>> StageLayerSpans(const GptConfig& cfg, const ParallelConfig& pc,
                                               int pp_rank);

// One registered ShardedTensor and the rank-local parameter that holds its data
// (GptConfig::extra_state sets ModelShard::extra_state on a linear layer's weight).
using GptShard = ModelShard;

// "decoder.layers.3.self_attention.linear_qkv._extra_state" grid and replica
// for the module whose weight has key `weight_key` (".weight" replaced).
// `prefix_axes` are the leading (offset, size) axes the weight got from
// stacking / the expert axis; replica is the weight module's (0, tp, dp).
ShardedObject ExtraStateObject(const std::string& weight_key,
                               const std::vector<std::pair<int64_t, int64_t>>& prefix_axes,
                               ReplicaId replica);

// Every ShardedTensor of the rank at `coords`, in module order.
Result<std::vector<GptShard>> GptShards(const GptConfig& cfg, const ParallelConfig& pc,
                                        const RankCoords& coords);

// Bytes of the whole model's parameters (TP 1, PP 1, vocab padded as at TP
// 1), computed from one- and two-layer probes, so a hostile config (10^6
// layers, hidden 10^7) costs nothing to size. Used to refuse a checkpoint's
// recorded config that describes more parameters than the checkpoint holds.
Result<double> GptModelBytes(const GptConfig& cfg);

}  // namespace ckpt::reshard
