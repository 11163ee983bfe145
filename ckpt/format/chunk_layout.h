// The chunk size a shard writer picks for a tensor shard (PlanLayout in
// shard_layout.cc), for planners that simulate files never written (so their
// costs match real files). Pure; thread-safe.
#pragma once

#include <cstdint>

#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"

namespace ckpt {

// Elements per chunk of `t` written with target `chunk_bytes` (0 for an
// empty shard); the error of PlanLayout for an invalid shard.
Result<int64_t> ShardChunkElems(const ShardedTensor& t, int64_t chunk_bytes);

}  // namespace ckpt
