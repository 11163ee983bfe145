// GptLocalState: a rank's local GPT parameter buffers (the synthetic
// workload's model state), exposed as a ShardedStateDict over the
// descriptors of reshard/megatron_gpt.h, filled with and checked against the
// deterministic expected values (expected_values.h).
//
// Owns its memory; spans handed out stay valid while the object lives
// (moving it keeps them valid). Not thread-safe.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"
#include "reshard/megatron_gpt.h"

namespace ckpt::workload {

using reshard::GptShard;

// Owns a rank's local parameter buffers (zeroed) and exposes them as a
// ShardedStateDict whose spans point into this object: they stay valid while
// the object lives (moving it keeps them valid). State dicts also carry the
// shards' `_extra_state` objects (GptShard::extra_state, empty blobs), so a
// load of a checkpoint without them fails as MCore's strict load does.
// Not thread-safe.
class GptLocalState {
 public:
  // Fails if shards of one parameter disagree on its shape or dtype, or overrun it.
  static Result<GptLocalState> Create(std::vector<GptShard> shards);

  const std::vector<GptShard>& shards() const { return shards_; }
  ShardedStateDict StateDict();
  // A state dict registering `other` descriptors over this object's local
  // parameters (same param names and shapes), e.g. NaiveFc1Shards of the same
  // rank: the memory holds the right local values, the descriptors are wrong.
  Result<ShardedStateDict> StateDictFor(const std::vector<GptShard>& other);
  std::span<std::byte> ShardData(size_t i);  // data of shards()[i]
  std::span<const std::byte> ShardView(size_t i) const;
  // A whole local parameter by GptShard::param name; empty if unknown.
  std::span<std::byte> Param(const std::string& name);
  int64_t TotalBytes() const;

  // Fills every shard with its expected values (rows >= vocab_size of
  // allow_shape_mismatch tensors are zero).
  Status FillExpected(int64_t vocab_size);
  // Total mismatching elements over all shards; `first_bad` (if non-null) gets
  // "<key> element <i>" of the first one.
  Result<int64_t> CountMismatches(int64_t vocab_size, std::string* first_bad) const;

 private:
  explicit GptLocalState(std::vector<GptShard> shards) : shards_(std::move(shards)) {}
  std::vector<GptShard> shards_;
  std::map<std::string, std::vector<std::byte>> params_;
};

}  // namespace ckpt::workload
