// Layout-invariant fingerprint of a committed checkpoint's global state, and
// an element-wise diff of two checkpoints.
//
// Canonical form: every tensor key in its global row-major order, whatever
// boxes, flat ranges and files its shards were saved in. A tensor saved with
// allow_shape_mismatch (padded vocab) is canonically the leading rows its
// model family names (reshard/family.h ModelFamily::CanonicalRows; the family
// and config come from the manifest metadata, ModelOf): the padding rows
// depend on TP and are not state. They must be zero; any non-zero padding
// element is counted (padding_nonzero) and, being a difference of state,
// folded into the digest. Without a recorded model the whole saved shape is
// canonical (then padded tensors are layout-dependent); a recorded family
// that is not registered, or a config it refuses, is an error (ModelOf).
// Objects are included when their grid is one cell (layout-invariant blobs);
// per-rank grids are layout-dependent by construction and are listed as excluded.
//
// Tensor digest = SHA-256("ckpt-fingerprint-v1", key, dtype, canonical shape,
// data); the checkpoint digest = SHA-256 over the sorted per-tensor and
// per-object lines. The manifest's iteration and layout are not part of it.
//
// Memory: a tensor is read in blocks of whole global rows (axis 0) of about
// block_bytes each, through a read plan per block (reshard/geometry/read_plan.h); each
// stored chunk is read, hash-checked and decoded once and kept until the next
// chunk of the same saved shard is needed, so peak memory is one block plus
// one decoded chunk per saved shard of the tensor being read - never a whole
// global tensor (unless it is a single row).
//
// Ulp distance: |ordered(a) - ordered(b)| of the IEEE bit patterns, where the
// ordering maps floats monotonically to integers (adjacent floats are 1
// apart; +0 and -0 are 0 apart, though still counted as bitwise different);
// integers: |a - b|; a NaN against anything with other bits: kUlpNaN.
//
// Errors: what ReadManifest / ChunkReader / PlanReads report (kNotFound,
// kCorruption naming file, tensor and chunk). Thread-safe: no shared state.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"
#include "ckpt/storage/storage.h"

namespace ckpt {

struct FingerprintOptions {
  int64_t iteration = -1;           // -1: the tracker's
  Env* env = nullptr;               // a plain path's IO (nullptr: DefaultEnv()); a URL root uses its backend's
  Storage* storage = nullptr;       // an opened root: the root string and env are then unused
  bool verify_hashes = true;        // check every chunk's SHA-256 on the way
  int64_t block_bytes = 4 << 20;    // target size of one block of global rows
};

struct TensorFingerprint {
  std::string key;
  DType dtype = DType::kFloat32;
  Shape saved_shape;      // global shape as saved
  Shape canonical_shape;  // what is hashed
  int shards = 0;
  int64_t bytes = 0;      // canonical bytes hashed
  int64_t padding_nonzero = 0;
  std::string digest;     // hex SHA-256
};

struct ObjectFingerprint {
  std::string key;
  int64_t cells = 0;
  bool included = false;  // one-cell objects only
  std::string digest;     // empty when excluded
};

struct Fingerprint {
  int64_t iteration = 0;
  std::string digest;
  std::vector<TensorFingerprint> tensors;  // sorted by key
  std::vector<ObjectFingerprint> objects;  // sorted by key
  int64_t bytes_hashed = 0;       // canonical tensor + object bytes
  int64_t bytes_read = 0;         // stored bytes read from disk
  int64_t chunks_read = 0;
  int64_t peak_buffer_bytes = 0;  // largest block + chunk cache held at once
  double seconds = 0;
};

Result<Fingerprint> FingerprintCheckpoint(const std::string& root, const FingerprintOptions& opts = {});

inline constexpr uint64_t kUlpNaN = std::numeric_limits<uint64_t>::max();
// Distance between element a and element b (raw bytes of dtype t).
uint64_t UlpDistance(DType t, const std::byte* a, const std::byte* b);

struct TensorDiff {
  std::string key;
  // "differ", "only_a", "only_b", "dtype", "shape" (canonical shapes differ)
  // or "padding" (equal canonical data, different non-zero padding counts).
  std::string status;
  int64_t elements = 0;        // canonical elements compared
  int64_t differing = 0;       // bitwise-different elements
  uint64_t max_ulp = 0;        // kUlpNaN if a NaN is involved
  Shape max_index;             // global index of the (first) largest difference
  double a_value = 0, b_value = 0;  // at max_index
  double max_abs = 0;          // largest |a - b| over finite pairs
};

struct ObjectDiff {
  std::string key;
  std::string status;  // "differ", "only_a", "only_b"
};

struct CheckpointDiff {
  int64_t iteration_a = 0, iteration_b = 0;
  int64_t tensors_compared = 0, objects_compared = 0;
  std::vector<TensorDiff> tensors;  // differing tensors only, sorted by key
  std::vector<ObjectDiff> objects;  // differing one-cell objects only
  bool same() const { return tensors.empty() && objects.empty(); }
  uint64_t max_ulp() const;         // over differing tensors compared elementwise
};

// Compares the canonical forms of two checkpoints (options per side: iteration, env, verify).
Result<CheckpointDiff> DiffCheckpoints(const std::string& root_a, const std::string& root_b,
                                       const FingerprintOptions& a = {}, const FingerprintOptions& b = {});

}  // namespace ckpt
