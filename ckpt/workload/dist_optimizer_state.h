// DistOptimizerState: a rank's distributed-optimizer state (fp32 master
// params, exp_avg, exp_avg_sq per owned bucket slice, and the step) for the
// synthetic GPT workload, laid out by reshard/dist_optimizer.h, exposed in any
// of its formats (MCore's fully_reshardable / dp_reshardable, ckpt's model /
// bucket space), filled with and checked against the deterministic expected
// values (the same values whatever the format).
//
// Owns its memory (spans stay valid while it lives, also across moves).
// Not thread-safe.
#pragma once

#include <array>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"
#include "reshard/dist_optimizer.h"

namespace ckpt::workload {

using reshard::DistOptOptions;
using reshard::GptConfig;
using reshard::GptShard;
using reshard::OptimizerFormat;
using reshard::RankBuffer;

// The dp_reshardable param-layout object of a buffer: "[chained_<i>.]optimizer.
// distributed.dp_group_idx_<m>.gbuf_idx_<g>.param_layout" (JSON: "dtype",
// "numel_unpadded" per bucket, "params": [bucket, offset in bucket, numel,
// boxes [key, global_offset, local_shape] in the param's flat order]).
std::string DpReshardableLayoutKey(const RankBuffer& rb);
inline constexpr std::string_view kDpLayoutSuffix = ".param_layout";

class DistOptimizerState {
 public:
  static Result<DistOptimizerState> Create(const GptConfig& cfg, const ParallelConfig& pc,
                                           const RankCoords& coords,
                                           const std::vector<GptShard>& model_shards,
                                           const DistOptOptions& opts);

  const std::vector<RankBuffer>& buffers() const { return buffers_; }
  // Spans into this object: model-space fragments or bucket-space slices (+
  // layout objects), and the step in every format.
  ShardedStateDict StateDict(OptimizerFormat format);
  // Bucket-space formats: just the layout objects (empty bytes), to load
  // before the tensors; then CheckLayout(format, loaded) explains a mismatch
  // (FailedPrecondition). Model-space formats: empty request, always OK.
  ShardedStateDict LayoutRequest(OptimizerFormat format) const;
  Status CheckLayout(OptimizerFormat format, const ShardedStateDict& loaded) const;
  // dp_reshardable loaded under another bucket layout (another EP size, which
  // moves the experts between the dense and the expert buffers, another
  // bucket size or DP size): `saved` maps every "<prefix>gbuf_idx_<g>.
  // param_layout" object of the checkpoint to its JSON. If each of this
  // rank's buffers is saved with an equal layout, StateDict(kDpReshardable)
  // stays MCore's (whole bucket slices). Otherwise it requests each owned
  // fragment of each parameter box from the saved bucket that holds the same
  // box, at the box's position there (ckpt's extension; MCore asserts equal
  // buckets). FailedPrecondition naming the box when no saved bucket holds it
  // (another TP/PP split); Corruption when a layout object is malformed.
  // `consumed`: the checkpoint's dp_reshardable objects (layouts, bucket
  // sizes), requested too when remapped, so that a strict load counts them.
  Status UseSavedDpLayouts(const std::map<std::string, std::string>& saved,
                           std::vector<ShardedObject> consumed = {});
  // LayoutRequest / CheckLayout for kBucketSpace.
  ShardedStateDict BucketLayoutRequest() const;
  Status CheckBucketLayout(const ShardedStateDict& loaded) const;

  Status FillExpected(int64_t vocab_size);
  // Mismatching elements (fragments, padding, step); first_bad gets "<key> element <i>".
  Result<int64_t> CountMismatches(int64_t vocab_size, std::string* first_bad) const;
  int64_t StateElements() const;  // state elements held (3 per owned slot, padding included)
  int64_t TotalBytes() const;
  size_t NumFragments() const { return fragments_.size(); }

 private:
  struct Remap {  // one fragment's place in a saved dp_reshardable bucket
    std::string bucket_key;  // "<saved prefix>.dtype_<d>.bucket_idx_<b>." + state
    int64_t unpadded = 0, offset = 0;
    size_t fragment = 0;
  };
  struct Fragment {
    ShardedTensor tensor;  // fp32, key of the param's tensor (no state prefix)
    int buffer = 0;
    int64_t pos = 0;  // into states_[buffer][*]
  };
  DistOptimizerState() = default;
  Status Build(const std::vector<GptShard>& model_shards);
  std::span<std::byte> Span(int buffer, int state, int64_t pos, int64_t n);
  std::span<const std::byte> View(int buffer, int state, int64_t pos, int64_t n) const;
  ShardedTensor StepTensor() const;
  void AddModelSpace(OptimizerFormat format, ShardedStateDict* sd);
  void AddBucketSpace(ShardedStateDict* sd);
  void AddDpReshardable(ShardedStateDict* sd);
  void AddRemapped(ShardedStateDict* sd);  // the fragments at their saved bucket places

  ParallelConfig pc_;
  RankCoords coords_;
  std::vector<RankBuffer> buffers_;
  std::vector<std::array<std::vector<float>, 3>> states_;  // per buffer, per Adam state
  std::vector<std::vector<std::pair<int64_t, int64_t>>> padding_;  // per buffer [pos, end)
  std::vector<Fragment> fragments_;
  std::vector<std::string> descriptors_;  // per buffer, bucket-space layout JSON
  std::vector<std::string> mcore_layouts_;  // per buffer, dp_reshardable param layout JSON
  std::vector<Remap> remap_;  // UseSavedDpLayouts; loads through it when remapped_
  std::vector<ShardedObject> consumed_;  // requested with remap_
  bool remapped_ = false;
  std::vector<int64_t> step_ = std::vector<int64_t>(1, 0);  // heap: spans survive moves
};

}  // namespace ckpt::workload
