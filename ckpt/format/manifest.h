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

#include "ckpt/base/chunk_hash.h"
#include "ckpt/format/shard_file.h"
#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"
#include "ckpt/storage/layout.h"

namespace ckpt {

// 1: the first version (SHA-256 chunk digests, no "chunk_hash").
// 2: files[].meta_sha256 (always SHA-256 of each shard file's bytes outside
// its chunks, file_meta_hash.h) and the optional "chunk_hash" member naming
// the per-chunk digest algorithm (ckpt/base/chunk_hash.h; absent = SHA-256,
// and writers omit it for SHA-256). Readers accept 1..kFormatVersion.
inline constexpr int kFormatVersion = 2;
inline constexpr int kOldestFormatVersion = 1;

struct ManifestFile {
  std::string name;  // relative to the iteration directory
  int rank = 0;      // the rank that wrote it
  uint64_t size = 0; // bytes
  std::string meta_sha256;  // v2: SHA-256 of the bytes outside the chunks; empty in v1
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
  int format_version = kFormatVersion;  // as read; SerializeManifest writes it (new manifests: kFormatVersion)
  ChunkHash chunk_hash = ChunkHash::kSha256;  // of every ChunkRecord::sha256 (the digest, whatever the hash)
  int64_t iteration = 0;
  nlohmann::json layout = nlohmann::json::object();    // e.g. {"tp":4,"pp":1,"dp":1,...}
  nlohmann::json metadata = nlohmann::json::object();  // caller-defined (args, model config)
  std::vector<ManifestFile> files;
  std::vector<ManifestShard> shards;
  std::vector<ManifestObject> objects;

  int64_t TotalStoredBytes() const;
  int64_t TotalTensorBytes() const;  // raw bytes of all shards
};

// Limits on untrusted manifests (a valid self-hash proves nothing about the
// writer): JSON nesting depth, dimensions of a shape, the iteration number.
inline constexpr int kMaxManifestJsonDepth = 256;
inline constexpr int kMaxManifestDims = 32;
inline constexpr int64_t kMaxIteration = 999'999'999'999;
// Size limits (docs/FORMAT.md "Limits"), from what a legitimate huge job
// writes: 16,384 ranks (files), 10^6 tensor shards (~300 bytes of manifest
// each) and 4 x 10^6 chunks (~90 bytes each: 16 TiB of state in 4 MiB chunks)
// make ~0.7 GB of manifest; the cap leaves headroom above that. Checked on the
// file's size before it is read; parsing costs about the Manifest itself
// (streamed, manifest_parse.cc), ~3x the text.
inline constexpr uint64_t kMaxManifestBytes = uint64_t(1) << 30;
inline constexpr size_t kMaxManifestFiles = size_t(1) << 20;
// The bytes of a shard file outside its chunks (HDF5 metadata, alignment
// padding) are bounded: at most kMetaBytesBase + per dataset
// kMetaBytesPerDataset + 4 x (key + dataset path length) + kMetaBytesPerChunk
// per chunk (ckpt's writer uses ~3.3 KiB a dataset, less than 1/8 of it) (a direct-IO save pads chunks of
// >= 64 KiB to 4 KiB boundaries). files[].size beyond its chunks' extent plus
// that is refused before anything reads the file: verify hashes every byte
// outside the chunks, so an unbounded size would make it read a sparse TiB.
inline constexpr uint64_t kMetaBytesBase = uint64_t(1) << 20;
inline constexpr uint64_t kMetaBytesPerDataset = uint64_t(16) << 10;
inline constexpr uint64_t kMetaBytesPerChunk = uint64_t(8) << 10;
// zstd cannot expand a frame more than this: a block decodes to at most
// 128 KiB and costs at least 4 bytes (an RLE block), so a chunk whose raw
// size exceeds stored_size * this bound is not a zstd encoding of it.
inline constexpr uint64_t kMaxZstdExpansion = 32768;

// Serialises with the self-hash line. Deterministic for equal manifests.
std::string SerializeManifest(const Manifest& m);
// Parses and verifies; `path` only names the file in errors. A manifest is
// untrusted input: beyond its self-hash, its size is at most kMaxManifestBytes,
// the JSON depth is bounded before parsing, no object repeats a member, no
// tensor lists a shard twice, every field is type- and range-checked (never narrowed), and every
// check of ValidateManifest but coverage runs (a rank's partial manifest, its
// vote, covers only its own shards), all before any caller allocates or reads
// by it. ReadManifest (checkpoint.h) adds coverage for committed manifests.
// Failures are kCorruption naming the field ("tensors['w'].shards[0].file: ..."),
// except a format_version or chunk_hash this build does not know:
// kFailedPrecondition (the manifest may be sound; this reader is too old).
Result<Manifest> ParseManifest(std::string_view bytes, const std::string& path);
// Consistency of every field with the others, in checked arithmetic
// (manifest_check.cc): file names are plain names (no '/', "." or ".."),
// unique; shapes have at most kMaxManifestDims non-negative dims whose
// element and byte counts fit in int64; boxes and flat ranges lie inside
// their tensors; file indices exist; each record's chunk_elems, chunk count
// and stored sizes match the chunk layout the writer produces (raw chunks:
// chunk_elems * dtype size bytes; zstd: at most kMaxZstdExpansion); every
// chunk lies inside its file's recorded size and no two overlap; a file's
// bytes outside its chunks are bounded (kMetaBytes*); objects sit
// inside their grid; each tensor's shards tile it exactly once (coverage).
// kCorruption naming the field on the first problem.
Status ValidateManifest(const Manifest& m);
// kCorruption if JSON text nests arrays/objects deeper than max_depth
// (checked without recursion, strings skipped).
Status CheckJsonDepth(std::string_view text, int max_depth);

// kManifestName, kTrackerName, IterDirName, TmpIterDirName, ParseIterDirName,
// IsTmpIterDirName: ckpt/storage/layout.h.
std::string ShardFileName(int rank);  // "rank_00003.h5"

}  // namespace ckpt
