// Read plans: which chunks of which saved shards a loading rank reads, and
// where each piece lands in its requested buffers. Computed from metadata only.
//
// A saved dataset is split into contiguous flat chunks: chunk i covers flat
// elements [i * chunk_elems, min((i + 1) * chunk_elems, n)) (chunk_elems <= 0:
// one chunk holding the whole shard). Reading a chunk means reading its stored
// bytes, checking its hash and decoding it.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"
#include "reshard/geometry/intersect.h"

namespace ckpt::reshard {

struct SavedShard {
  ShardedTensor meta;                   // as saved (main replica)
  int file_index = 0;                   // which shard file holds it
  int64_t chunk_elems = 0;              // elements per chunk (last may be shorter)
  std::vector<int64_t> chunk_stored_bytes;  // per chunk, for cost estimates; a chunk
                                            // missing here counts its raw bytes
};

struct ChunkRead {
  int saved_shard = 0;         // index into the saved shard list
  int64_t chunk = 0;           // chunk index inside that shard
  std::vector<CopyRun> runs;   // src relative to the chunk's first element
};

struct RequestPlan {
  int request = 0;             // index into the request list
  // Grouped by saved shard, chunks ascending within a shard; a (shard, chunk)
  // appears once per request; runs sorted by src, dst in request flat coords.
  std::vector<ChunkRead> reads;
  int64_t covered_elems = 0;   // elements the reads fill
  int64_t zero_fill_elems = 0; // requested elements outside the saved global shape
};

struct ReadPlan {
  std::vector<RequestPlan> requests;  // one per request, in request order
  int64_t bytes_read = 0;      // stored bytes of all distinct chunks read
  int64_t chunks_read = 0;     // distinct (shard, chunk) pairs
  std::set<int> files;         // file indices touched
};

// Plans the reads for `requests` against `saved` (all main replicas of all keys;
// entries with a non-zero replica_id are skipped). With allow_shape_mismatch the
// boxes' overlap is read in the same global coordinates; requested elements
// outside the saved global shape are zero_fill_elems and saved elements outside
// the requested global shape are never read. Errors name the tensor:
//   kNotFound        "tensor '<key>' is not in the checkpoint";
//   kInvalidArgument the request fails Validate(), dtype differs (both named),
//                    global shape differs (both named) without
//                    allow_shape_mismatch or with a different rank, or requested
//                    elements inside the saved global shape that no saved shard
//                    covers (count named: the checkpoint has a gap);
//   kCorruption      a saved shard of the key is malformed, or saved shards
//                    overlap inside the request.
// Cost: O(S) to index S saved shards by key, then per request O(log s) to find
// candidates among the s shards of its key (binary search along the split
// axis) plus the runs produced. Each key is validated and sorted once, on its
// first request.
Result<ReadPlan> PlanReads(const std::vector<SavedShard>& saved,
                           const std::vector<ShardedTensor>& requests);

// Stored bytes of the distinct chunks the given plans read together (what a
// group of readers sharing reads, or one writer rank of an offline reshard,
// reads from disk); a chunk index outside its shard's list counts 0.
int64_t UnionStoredBytes(const std::set<const ReadPlan*>& plans, const std::vector<SavedShard>& saved);

}  // namespace ckpt::reshard
