// Manifest: the JSON index of one committed checkpoint (docs/FORMAT.md).
//
// It lists every shard file, every saved (main-replica) tensor shard with its
// dataset, box, flat range, chunk layout and per-chunk SHA-256, every sharded
// object, the parallel layout the checkpoint was saved with and free-form
// metadata. It hashes itself: the first line of the file is
//   {"manifest_sha256":"<hex>",
// and the hex digest covers every byte after that first newline. A manifest
// that does not verify is never trusted (kCorruption).
//
// Pure (no IO); thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/format/shard_file.h"
#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"

namespace ckpt {

inline constexpr int kFormatVersion = 1;
inline constexpr const char* kManifestName = "manifest.json";
inline constexpr const char* kTrackerName = "latest_checkpointed_iteration.txt";

struct ManifestFile {
  std::string name;  // relative to the iteration directory
  int rank = 0;      // the rank that wrote it
  uint64_t size = 0; // bytes
};

struct ManifestShard {
  ShardedTensor meta;  // replica_id as written (main replica)
  int file = 0;        // index into Manifest::files
  DatasetRecord record;
};

struct ManifestObject {
  ShardedObject meta;
  int file = 0;
  uint64_t size = 0;   // bytes of the blob
  DatasetRecord record;
};

struct Manifest {
  int format_version = kFormatVersion;
  int64_t iteration = 0;
  nlohmann::json layout = nlohmann::json::object();    // e.g. {"tp":4,"pp":1,"dp":1,...}
  nlohmann::json metadata = nlohmann::json::object();  // caller-defined (args, model config)
  std::vector<ManifestFile> files;
  std::vector<ManifestShard> shards;
  std::vector<ManifestObject> objects;

  int64_t TotalStoredBytes() const;
  int64_t TotalTensorBytes() const;  // raw bytes of all shards
};

// Serialises with the self-hash line. Deterministic for equal manifests.
std::string SerializeManifest(const Manifest& m);
// Parses and verifies; `path` only names the file in errors.
Result<Manifest> ParseManifest(std::string_view bytes, const std::string& path);

// Iteration directory name "iter_0000042" and the temporary one
// ".iter_0000042.tmp-<nonce>".
std::string IterDirName(int64_t iteration);
std::string TmpIterDirName(int64_t iteration, const std::string& nonce);
// Parses "iter_0000042" -> 42; anything else -> kInvalidArgument.
Result<int64_t> ParseIterDirName(std::string_view name);
bool IsTmpIterDirName(std::string_view name);
std::string ShardFileName(int rank);  // "rank_00003.h5"

}  // namespace ckpt
