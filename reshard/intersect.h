// Box / flat-range intersection between a saved shard and a requested shard.
//
// Both shards are ShardedTensor descriptors of the same key: a box in global
// coordinates, optionally narrowed to a flat (row-major) range of that box.
// Element positions are "flat coordinates": the index of the element in the
// shard's own data buffer (row-major over its box, minus flat_range.begin).
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/sharded_tensor.h"
#include "ckpt/status.h"

namespace ckpt::reshard {

// Copy `len` elements from saved flat position `src` to requested flat position `dst`.
struct CopyRun {
  int64_t src = 0;
  int64_t dst = 0;
  int64_t len = 0;
  bool operator==(const CopyRun&) const = default;
};

// Runs covering exactly the elements both shards hold, sorted by src, adjacent
// runs merged when contiguous in both. Shapes' ranks must match (else empty).
std::vector<CopyRun> Intersect(const ShardedTensor& saved, const ShardedTensor& requested);

// Number of elements two shards share (sum of Intersect lengths, computed cheaply).
int64_t OverlapCount(const ShardedTensor& a, const ShardedTensor& b);

// Checks that the main-replica shards of one tensor cover every element of
// `global_shape` exactly once. Errors are kCorruption naming the tensor and,
// for an overlap, the two shards; for a gap, the number of missing elements.
Status CheckCoverage(const std::string& key, const Shape& global_shape,
                     const std::vector<ShardedTensor>& main_shards);

}  // namespace ckpt::reshard
