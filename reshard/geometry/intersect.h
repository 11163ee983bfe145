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

#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"

namespace ckpt::reshard {

// Copy `len` elements from saved flat position `src` to requested flat position `dst`.
struct CopyRun {
  int64_t src = 0;
  int64_t dst = 0;
  int64_t len = 0;
  bool operator==(const CopyRun&) const = default;
};

// Runs covering exactly the elements both shards hold, sorted by src (and so
// by dst), adjacent runs merged when contiguous in both: maximal runs, e.g. one
// run for an axis-0 split or a block whose trailing dims match, one run per row
// for an axis-1 split. Shapes' ranks must match (else empty); rank-0 tensors
// intersect as one element; zero-sized boxes or empty flat ranges give none.
// Boxes are taken as given (global_shape is not consulted), so a request of a
// padded tensor may extend past the saved global shape.
// Cost: O(rank * log(rows)) plus O(rank) per run returned; rows outside the
// flat ranges are skipped, not visited.
std::vector<CopyRun> Intersect(const ShardedTensor& saved, const ShardedTensor& requested);

// Number of elements two shards share (sum of Intersect lengths). O(rank)
// without flat ranges; with them, as Intersect but without materialising runs.
int64_t OverlapCount(const ShardedTensor& a, const ShardedTensor& b);

// Checks that the main-replica shards of one tensor cover every element of
// `global_shape` exactly once (dtype-independent; shards holding no element
// are ignored). Errors are kCorruption naming the tensor and:
//   - a shard of the wrong rank, declaring another global shape, with a box
//     outside `global_shape` or a flat range outside its box: that shard;
//   - an overlap: the two shards (#index and DebugString) and overlap size;
//   - a gap: the number of missing elements and, when a bounded search finds
//     one, one missing global index ("e.g. global index [4, 0]").
// Cost: O(n log n) for n shards when boxes are disjoint or identical (the
// Megatron layouts); pairs of distinct intersecting boxes cost pairwise.
Status CheckCoverage(const std::string& key, const Shape& global_shape,
                     const std::vector<ShardedTensor>& main_shards);

}  // namespace ckpt::reshard
