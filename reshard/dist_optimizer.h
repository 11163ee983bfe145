// Megatron-Core distributed-optimizer state: buffer/bucket layout, DP
// ownership, and its two checkpoint formats.
//
// Layout (megatron/core/distributed/param_and_grad_buffer.py, _ParamAndGradBuffer):
// each model chunk's DDP groups its parameters (named_parameters order) into
// one buffer per (dense | expert, dtype); a buffer walks its params in REVERSE
// order, starts each at a multiple of 64 elements, closes a bucket once it holds
// >= bucket_elems elements (no bucketing: one bucket), pads each bucket's end to
// lcm(dp, 128), and puts a shared (tied, pp > 1) embedding into a bucket of its
// own. Bucketing is off on pipeline stages > 0 and model chunks > 0 (MCore DDP /
// training.get_model). Expert params (allreduce=False, EP > 1) use the
// expert-data-parallel group; dense ones the DP x CP group.
// Ownership (megatron/core/optimizer/distrib_optimizer.py, _build_model_gbuf_range):
// each bucket is split into dp equal contiguous slices; DP rank r owns slice r
// and holds fp32 main params, exp_avg and exp_avg_sq for exactly that slice.
//
// Formats (OptimizerFormat; the MCore names are DistributedOptimizer's
// `distrib_optim_sharding_type`, megatron/core/optimizer/distrib_optimizer.py):
//  - fully_reshardable (MCore's, `--dist-ckpt-optim-fully-reshardable`): per
//    model tensor and state s in {param, exp_avg, exp_avg_sq} a tensor
//    "optimizer.state.<s>.<param key>" with the param's global shape: the
//    whole-parameter boxes MCore registers (a SwiGLU fc1 param is two boxes,
//    W and V). ckpt writes each DP rank's owned fragment of that global tensor
//    (flat range, DP slot 0) instead of gathering it on DP rank 0 first; the
//    stored global tensors are the same, and loaders may ask for whole boxes
//    (MCore's way) or fragments. Reshardable across DP, TP, PP, EP and bucket size.
//  - model ("fully_sharded_model_space", MCore's deprecated model-space format;
//    current MCore refuses its flattened_range descriptors): the same global
//    tensors under "optimizer.state.<s>.<param key>" with s in {fp32_param,
//    exp_avg, exp_avg_sq}. Kept readable and writable; reshards like the above.
//  - dp_reshardable (MCore's default): per buffer, bucket and state one flat
//    tensor "[chained_<i>.]optimizer.distributed.dp_group_idx_<m>.gbuf_idx_<g>.
//    dtype_<(param dtype, grad dtype)>.bucket_idx_<b>.<s>" (s in {param,
//    exp_avg, exp_avg_sq}) of the bucket's UNPADDED size; DP rank r holds
//    [r * slice, min((r + 1) * slice, unpadded)). m is MCore's
//    data_parallel_group_idx, the rank in the optimizer's model-parallel
//    group: tp_rank + tp * pp_rank for dense buffers, tp_rank + tp * (ep_rank +
//    ep * pp_rank) for expert ones (expert TP x EP x PP, optimizer/__init__.py
//    get_megatron_optimizer, parallel_state.py 'tp-ep-pp'); "chained_<i>."
//    (0 dense, 1 experts) appears when the rank has expert buffers (two chained
//    optimizers). Objects "<prefix>per_bucket_numel" and
//    "<prefix>per_bucket_numel_unpadded" hold the bucket sizes per buffer
//    (JSON), plus ckpt's "<prefix>gbuf_idx_<g>.param_layout" (the params'
//    boxes and positions inside their buckets, DP-independent). Loadable at
//    another DP size when the unpadded bucket sizes and param layout are equal
//    (as MCore asserts); another TP/PP/EP split or bucket size is refused.
//  - bucket (ckpt's own, before MCore's names): each rank's raw slice of each
//    DP-padded bucket, key "optimizer.distributed.<dp group>.gbuf_idx_<i>.
//    dtype_<d>.bucket_idx_<b>.<state>", plus one layout descriptor object per
//    buffer. It loads only into the identical bucket layout (same DP size
//    too); CheckBucketLayout compares the descriptors (loaded first, a few
//    hundred bytes) and explains.
// The Adam step is "optimizer.step", an int64 [1] replicated on every rank.
//
// Test contents: element i (global index in the param's global tensor) of
// state s of param key k is ExpectedValue(k + "/" + s, i, fp32); padded vocab
// rows and bucket padding are zero.
//
// Layout functions are pure and thread-safe. DistOptimizerState owns its
// buffers; state dicts point into it (valid while it lives, also after a move).
// Not thread-safe. Errors: InvalidArgument naming the field or parameter;
// CheckBucketLayout: FailedPrecondition with the explanatory sentence.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "reshard/parallel_state.h"
#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"
#include "reshard/megatron_gpt.h"

namespace ckpt::reshard {

enum class OptimizerFormat { kModelSpace, kBucketSpace, kFullyReshardable, kDpReshardable };
// "model", "bucket", "fully_reshardable", "dp_reshardable"
std::string_view OptimizerFormatName(OptimizerFormat f);
Result<OptimizerFormat> ParseOptimizerFormat(std::string_view name);
// Formats whose tensors are raw bucket slices (a load checks the layout first).
bool IsBucketSpace(OptimizerFormat f);
// Formats `ckpt reshard` can rewrite under any layout (model space).
bool IsModelSpace(OptimizerFormat f);

inline constexpr std::array<const char*, 3> kAdamStates = {"fp32_param", "exp_avg", "exp_avg_sq"};
inline constexpr std::array<const char*, 3> kMcoreAdamStates = {"param", "exp_avg", "exp_avg_sq"};
// The state names a format writes: kAdamStates for model and bucket, MCore's otherwise.
const std::array<const char*, 3>& AdamStateNames(OptimizerFormat f);
// MCore's buffer dtype key "(torch.bfloat16, torch.float32)": param dtype and
// the grad dtype Megatron-LM uses with it (fp32 for bf16 and fp32 params).
std::string McoreBufferDtypeName(DType param_dtype);
inline constexpr const char* kStepKey = "optimizer.step";

// One parameter as a buffer sees it.
struct BufferParam {
  std::string name;  // rank-local parameter name (GptShard::param)
  int64_t numel = 0;
  bool shared_embedding = false;  // tied embedding/output weight with pp > 1
};

struct Bucket {
  int64_t start = 0, end = 0;  // [start, end) in the buffer; end - start % dp == 0
  int64_t numel_unpadded = 0;
  int first_param = 0, num_params = 0;  // into BufferLayout::params (buffer order)
};

struct BufferLayout {
  std::vector<BufferParam> params;  // buffer order: the model order reversed
  std::vector<int64_t> starts;      // per param, its first element in the buffer
  std::vector<Bucket> buckets;
  int dp_size = 1;
  int64_t numel() const { return buckets.empty() ? 0 : buckets.back().end; }
  int64_t SliceElems(int bucket) const;  // one DP rank's share of a bucket
};

// MCore's index arithmetic over `model_order` (named_parameters order).
// bucket_elems <= 0: one bucket. Fails on dp < 1 or a negative numel.
Result<BufferLayout> LayoutBuffer(const std::vector<BufferParam>& model_order, int dp_size,
                                  int64_t bucket_elems);

// A range of one parameter owned by one DP rank.
struct OwnedRange {
  int param = 0;  // index into BufferLayout::params
  int bucket = 0;
  int64_t param_begin = 0, param_end = 0;  // flat range inside the (local) parameter
  int64_t local_pos = 0;  // position in the rank's slices of all buckets, concatenated
};
std::vector<OwnedRange> OwnedRanges(const BufferLayout& layout, int dp_rank);

struct DistOptOptions {
  int64_t bucket_elems = 0;  // DDP bucket_size; <= 0: no bucketing
};

// One DDP buffer of a rank: which chunk/group it belongs to and its layout.
struct RankBuffer {
  int chunk = 0;
  bool expert = false;
  DType dtype = DType::kBFloat16;
  int gbuf_index = 0;      // among the rank's dense (or expert) buffers, chunk-major
  std::string dp_domain;   // "dp_group_idx_<n>" / "expert_dp_group_idx_<n>"
  int dp_rank = 0;
  BufferLayout layout;
  int64_t bucket_elems = 0;  // the bucket size in effect (0: none)
  int mp_rank = 0;            // MCore data_parallel_group_idx: tp_rank + tp * pp_rank
  int chained = -1;           // MCore ChainedOptimizer index (0 dense, 1 expert), -1: one optimizer
};

// The rank's buffers, from its model shards (GptShards) in MCore registration
// order (the module order, except that attention registers linear_proj before
// linear_qkv, and with GptConfig::norm_keys kTe the input norm - TE's
// linear_qkv.layer_norm_weight - after linear_proj too).
Result<std::vector<RankBuffer>> GptRankBuffers(const GptConfig& cfg, const ParallelConfig& pc,
                                               const RankCoords& coords,
                                               const std::vector<GptShard>& model_shards,
                                               const DistOptOptions& opts);

}  // namespace ckpt::reshard
