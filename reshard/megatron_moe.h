// Mixture-of-experts MLP of a GPT layer with Megatron-Core layouts and keys.
//
// When GptConfig::num_experts > 0, every transformer layer's MLP is an MCore
// MoELayer: a router (TopKRouter, registered first) and SequentialMLP experts
// (one MLP per local expert, registered in local-expert order). Rules
// (megatron/core/transformer/moe/experts.py, moe_layer.py):
//  - experts are split over EP: rank ep holds experts ep*local .. ep*local+local-1
//    (local = num_experts / ep), i.e. global expert = ep_rank * local + i;
//  - an expert weight is keyed without the local index,
//    "decoder.layers.<L>.mlp.experts.experts.linear_fc1.weight" (MCore: the
//    MoELayer's child "experts" adds "experts." again; GptConfig::expert_keys
//    kLegacy drops it, as ckpt did before), with an expert axis of size
//    num_experts prepended (after the layer axis when layers are stacked);
//  - with GptConfig::extra_state, each expert linear's weight carries its
//    "<key>._extra_state" object on grid [layers,] num_experts, replica
//    (0, tp_rank, expert_dp_rank);
//  - inside an expert the dense rules apply with expert TP = TP: fc1 is
//    column-parallel (SwiGLU [W_r; V_r] -> two shards, W at block r and V at
//    block tp + r), fc2 row-parallel, an fc2 bias TP-replicated;
//  - the replica id's third slot is the expert-data-parallel rank (experts are
//    replicated over expert-DP, not over DP);
//  - "decoder.layers.<L>.mlp.router.weight" [num_experts, hidden] is a dense,
//    TP-replicated parameter: replica (0, tp_rank, dp_cp_rank).
// Local parameter names: "<chunk>decoder.layers.<local>.mlp.router.weight" and
// "<chunk>decoder.layers.<local>.mlp.experts.local_experts.<i>.linear_fc1.weight".
//
// Pure functions; thread-safe. Errors are InvalidArgument naming the field.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "reshard/parallel_state.h"
#include "ckpt/base/status.h"
#include "reshard/megatron_gpt.h"

namespace ckpt::reshard {

// Expert FFN width: moe_ffn_hidden, or ffn_hidden when that is 0.
int64_t MoeFfnHidden(const GptConfig& cfg);

// Layout checks for an MoE config (no-op for dense): num_experts % ep == 0,
// expert FFN % tp == 0. GptShards runs it.
Status CheckMoe(const GptConfig& cfg, const ParallelConfig& pc);

// Where one layer's MoE MLP goes.
struct MoeLayerPlace {
  std::string param_prefix;  // "<chunk>decoder.layers.<local index>."
  std::string key_prefix;    // "decoder.layers.<global>." or "decoder.layers." when stacked
  int stacked_layer = -1;    // global layer index when stacked (layer axis prepended), else -1
};

// Appends the router and this rank's experts of one layer to `out`, in MCore
// registration order. Requires CheckMoe(cfg, pc) to pass and cfg.num_experts > 0.
void AppendMoeMlpShards(const GptConfig& cfg, const ParallelConfig& pc, const RankCoords& coords,
                        const MoeLayerPlace& place, std::vector<GptShard>* out);

// True for a local parameter of an expert (an MCore param with allreduce=False
// once EP > 1): it lives in the expert-parallel DDP buffer.
bool IsExpertParam(std::string_view param_name);

// The MoE fields of a GptConfig in the checkpoint's "gpt" metadata (absent keys
// mean dense; an absent "expert_keys" means legacy). FromJson leaves other
// fields alone.
void MoeConfigToJson(const GptConfig& cfg, nlohmann::json* j);
Status MoeConfigFromJson(const nlohmann::json& j, GptConfig* cfg);

}  // namespace ckpt::reshard
