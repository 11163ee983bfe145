// Negative controls: deliberately wrong ways of describing or saving state,
// used by tests and scenarios to show that a check can fail. Never part of
// the product library (ckpt_testing links above every product layer).
//
// Pure functions of their arguments; thread-safe.
#pragma once

#include <functional>
#include <string_view>
#include <vector>

#include "ckpt/base/status.h"
#include "ckpt/convert/hf_llama.h"
#include "reshard/megatron_gpt.h"
#include "reshard/parallel_state.h"

namespace ckpt::testing {

// Like reshard::GptShards, but each local SwiGLU fc1 weight (and bias) of the
// dense MLP is one plain axis-0 slice (rows [r*2*ffn/tp, (r+1)*2*ffn/tp)) - the
// naive concatenation of local [W_r; V_r] tensors - which round-trips at the
// same TP but gives wrong values when loaded at another TP. Derived from the
// true descriptors: the W_r/V_r pair of one parameter becomes one shard over
// the whole local parameter. Params and offsets match GptShards', so check
// loaded data through the GptShards descriptors (the true layout).
// InvalidArgument unless cfg.swiglu.
Result<std::vector<reshard::GptShard>> NaiveFc1Shards(const reshard::GptConfig& cfg,
                                                      const ParallelConfig& pc,
                                                      const RankCoords& coords);

// `shards` (one rank's descriptors) with every per-layer key renumbered as a
// converter that ignores the VPP interleave would: the rank's chunk v, local
// layer i keyed decoder.layers.<before(p) + v*chunk + i>, where before(p) is the
// layer count of the stages before p - a contiguous layout instead of MCore's
// get_transformer_layer_offset (chunk v of stage p holds round v's p-th span).
// The data still comes from the right local parameter, so the checkpoint
// round-trips at the same layout and holds wrong layers anywhere else.
// Identity when vpp == 1; InvalidArgument for stacked layer keys.
Result<std::vector<reshard::GptShard>> ContiguousLayerKeys(const reshard::GptConfig& cfg,
                                                           const ParallelConfig& pc,
                                                           const RankCoords& coords,
                                                           std::vector<reshard::GptShard> shards);

// Wrong HF -> MCore mappings for `ckpt convert --to ckpt` (through
// HfImportOptions::links_hook), to show that the equal-logits oracle fails
// for them: "naive-qkv" concatenates [q; k; v] instead of interleaving per
// query group, "swap-gate-up" builds fc1 as [up; gate]. An empty function for
// any other name.
using LinksHook = std::function<void(std::vector<convert::TensorLink>*)>;
LinksHook ConvertNegativeControl(std::string_view name);

}  // namespace ckpt::testing
