// Read plans: which chunks of which saved shards a loading rank reads, and
// where each piece lands in its requested buffers. Computed from metadata only.
//
// A saved dataset is split into contiguous flat chunks: chunk i covers flat
// elements [i * chunk_elems, min((i + 1) * chunk_elems, n)). Reading a chunk
// means reading its stored bytes, checking its hash and decoding it.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ckpt/sharded_tensor.h"
#include "ckpt/status.h"
#include "reshard/intersect.h"

namespace ckpt::reshard {

struct SavedShard {
  ShardedTensor meta;                   // as saved (main replica)
  int file_index = 0;                   // which shard file holds it
  int64_t chunk_elems = 0;              // elements per chunk (last may be shorter)
  std::vector<int64_t> chunk_stored_bytes;  // per chunk, for cost estimates
};

struct ChunkRead {
  int saved_shard = 0;         // index into the saved shard list
  int64_t chunk = 0;           // chunk index inside that shard
  std::vector<CopyRun> runs;   // src relative to the chunk's first element
};

struct RequestPlan {
  int request = 0;             // index into the request list
  std::vector<ChunkRead> reads;
  int64_t covered_elems = 0;   // elements the reads fill
  int64_t zero_fill_elems = 0; // requested elements outside the saved global shape
};

struct ReadPlan {
  std::vector<RequestPlan> requests;
  int64_t bytes_read = 0;      // stored bytes of all distinct chunks read
  int64_t chunks_read = 0;     // distinct (shard, chunk) pairs
  std::set<int> files;         // file indices touched
};

// Plans the reads for `requests` against `saved` (all main replicas of all keys).
// Errors (kNotFound / kInvalidArgument) name the tensor: key missing from the
// checkpoint, dtype differs, global shape differs without allow_shape_mismatch,
// or requested elements inside the saved global shape that no shard covers.
Result<ReadPlan> PlanReads(const std::vector<SavedShard>& saved,
                           const std::vector<ShardedTensor>& requests);

}  // namespace ckpt::reshard
