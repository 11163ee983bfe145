// CheckpointRows: reads row blocks of the global tensors of one committed ckpt
// checkpoint, whatever layout it was saved in (the exporters' input).
//
// A read names a key, optionally an index on a stacked leading axis (stacked
// layer keys), and a range of rows of the remaining first axis (elements for
// 1-D tensors); it is planned against the manifest (reshard/geometry/read_plan.h),
// and every chunk is read, hash-checked and decoded through the Env. One
// decoded chunk per saved shard of the key last read is cached, so
// consecutive row blocks of a key do not re-read a chunk; memory is the
// caller's block plus that cache (dropped when another key is read).
// Rows beyond the saved shape of a padded-vocab tensor are not readable
// (kInvalidArgument); errors otherwise as the loader's (kCorruption naming
// file, tensor and chunk; kNotFound for a missing key).
// Not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/format/chunk_reader.h"
#include "ckpt/format/manifest.h"
#include "ckpt/storage/storage.h"
#include "reshard/geometry/read_plan.h"

namespace ckpt::convert {

class CheckpointRows {
 public:
  static Result<std::unique_ptr<CheckpointRows>> Open(Env* env, const std::string& root, int64_t iteration,
                                                      bool verify_hashes = true);

  const Manifest& manifest() const { return manifest_; }
  std::vector<std::string> TensorKeys() const;
  // The saved descriptor of `key` (dtype, global shape, allow_shape_mismatch).
  Result<const ShardedTensor*> Meta(const std::string& key) const;
  // Rows [r0, r1) of the first axis after the `layer` index (layer < 0: no
  // stacked axis) into dst, which must hold exactly those elements.
  Status ReadRows(const std::string& key, int layer, int64_t r0, int64_t r1, std::span<std::byte> dst);
  // The blob of one saved object cell.
  Result<std::vector<std::byte>> ReadObject(const ManifestObject& o);

  int64_t bytes_read() const { return reader_->bytes_read(); }
  int64_t cache_bytes() const;

 private:
  struct KeyShards {
    std::vector<int> manifest_shards;
    std::vector<reshard::SavedShard> saved;
    std::vector<std::pair<int64_t, std::vector<std::byte>>> cache;  // per saved shard: (chunk, bytes)
  };
  CheckpointRows() = default;
  Result<std::span<const std::byte>> Chunk(const std::string& key, KeyShards& ks, int s, int64_t chunk);

  std::unique_ptr<Storage> storage_;  // the root (a plain path or a URL); outlives reader_
  Manifest manifest_;
  std::unique_ptr<ChunkReader> reader_;
  std::map<std::string, KeyShards> keys_;
  std::string last_key_;
};

}  // namespace ckpt::convert
