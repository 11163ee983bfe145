// Test states: sharded state dicts that own their buffers, filled with a
// pattern that is a function of (key, global element index), so any loaded
// shard can be checked without a reference copy.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/base/sharded_tensor.h"

namespace ckpt::testing {

// Calls fn(flat_position_in_shard, global_linear_index) for every element the shard holds.
void ForEachElement(const ShardedTensor& meta, const std::function<void(int64_t, int64_t)>& fn);

// Pattern value of a global element, as the raw bytes of the dtype (written to out).
void PatternValue(const std::string& key, DType dtype, int64_t global_index, std::byte* out);

class OwnedState {
 public:
  // Adds a tensor shard; filled with the pattern when `fill`, else zeros.
  void Add(ShardedTensor meta, bool fill);
  void AddObject(ShardedObject meta, std::string bytes);
  ShardedStateDict& dict() { return dict_; }
  // Number of elements that differ from the pattern (zero outside `valid_rows`
  // of axis 0 is expected when valid_rows >= 0: padded vocab).
  int64_t CountMismatches(int64_t valid_rows = -1) const;

 private:
  ShardedStateDict dict_;
  std::vector<std::unique_ptr<std::vector<std::byte>>> buffers_;
};

// Shorthand for a descriptor.
ShardedTensor Desc(std::string key, DType dtype, Shape global, Shape offset, Shape local,
                   ReplicaId replica = {}, std::optional<FlatRange> flat = std::nullopt);

}  // namespace ckpt::testing
