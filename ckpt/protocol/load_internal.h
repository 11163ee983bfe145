// Internals shared by the loader (load.cc) and its shared-read path
// (load_share.cc): which chunks a rank needs, where their elements land, and
// the worker pool that reads them. Not a public API.
//
// Thread-safety: ChunkPlan is read-only once built; Scatter may run on several
// threads at once for different chunks (saved shards never overlap, so two
// chunks never write the same destination element).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/format/chunk_reader.h"
#include "ckpt/format/manifest.h"
#include "reshard/geometry/read_plan.h"

namespace ckpt::load_internal {

using ChunkKey = std::pair<int, int64_t>;  // (saved shard, chunk)

struct Target {
  int request;
  const std::vector<reshard::CopyRun>* runs;  // points into ChunkPlan::plan
};

// Every chunk this rank reads, in (file, offset) order, and where it goes.
struct ChunkPlan {
  reshard::ReadPlan plan;
  std::map<ChunkKey, std::vector<Target>> targets;
  std::vector<ChunkKey> order;
};

// Plans the reads of every tensor of `state` against `m` and zero-fills the
// requests' padded-vocab parts (counted in stats->zero_filled).
Result<ChunkPlan> PlanChunks(ShardedStateDict& state, const Manifest& m, LoadStats* stats);

// Copies a decoded chunk into every request that needs it; adds the elements
// copied to *elements. kCorruption if the chunk is shorter than its layout.
Status Scatter(ShardedStateDict& state, const Manifest& m, const ChunkPlan& cp, const ChunkKey& key,
               std::span<const std::byte> decoded, const std::string& file_path, int64_t* elements);

// Stored -> decoded bytes of chunk `chunk` of `rec` (raw chunks are returned
// as they are; compressed ones are decoded into *buf). `where` prefixes errors.
Result<std::span<const std::byte>> DecodeStored(const DatasetRecord& rec, int64_t chunk, size_t elem_size,
                                                std::span<const std::byte> stored, std::vector<std::byte>* buf,
                                                const std::string& where);

// Strict key handling (load_strict.cc). Keys of `state` the manifest lacks
// (missing, sorted, with one reason each) and manifest keys `state` does not
// request (unrequested, sorted).
struct KeyCheck {
  std::vector<std::string> missing, why, unrequested;
};
KeyCheck CheckKeys(const ShardedStateDict& state, const Manifest& m);
// kNotFound naming the missing keys when `mode` raises on them, else OK.
Status MissingKeysStatus(const KeyCheck& kc, StrictMode mode);
// A dict of the entries of `state` whose key is not in `drop`: tensors alias
// the same buffers; *kept_objects gets the index in `state` of each object kept.
ShardedStateDict Without(const ShardedStateDict& state, const std::vector<std::string>& drop,
                         std::vector<size_t>* kept_objects);
// Turns stats->unexpected_keys (this rank's unrequested keys) into the keys no
// rank requested (AllGather over opts.comm, phase "strict") and fails when
// opts.strict raises on them.
Status AgreeUnexpected(const LoadOptions& opts, LoadStats* stats);

// The files of `m` (under `dir`) this rank reads - those holding a chunk of
// `cp` or an object `state` requests - against their metadata hash
// (file_meta_hash.h CheckMetaHash): OK, or the first file's kCorruption.
// load --fallback checks it, so the iteration it picks is one `verify` passes.
// (load_meta.cc)
Status CheckMetaOfReadFiles(Env* env, const std::string& dir, const Manifest& m, const ChunkPlan& cp,
                            const ShardedStateDict& state);

// Runs fn(0..n-1), fn(0) on the calling thread, the rest on their own; joins all.
void RunWorkers(size_t n, const std::function<void(size_t)>& fn);

// Adds what `reader` read with O_DIRECT (and why it could not) and its
// read/hash/decode times to `stats`.
void AddDirectIo(const ChunkReader& reader, LoadStats* stats);

}  // namespace ckpt::load_internal
