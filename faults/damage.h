// After-commit damage: bit flips, truncations and deletions aimed at a
// committed checkpoint, with a record of exactly what was hit so a checker can
// require that verify and the loader name it.
//
// Targets are chosen from the manifest, so a bit flip always lands inside the
// stored bytes of a chunk (the bytes the manifest hashes) and the damaged
// file, tensor, dataset and chunk are known. Flips in HDF5 metadata are not
// offered: the loader never reads it (chunks are read by recorded offset), so
// they cannot change a loaded value; verify's HDF5 check covers them.
//
// Failure: kNotFound if the file or iteration does not exist; the damage is
// written through `env` and synced. Thread-compatible.
#pragma once

#include <cstdint>
#include <string>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"
#include "faults/fault_spec.h"

namespace ckpt::faults {

struct DamageRequest {
  Action kind = Action::kBitFlip;  // kBitFlip, kTruncate or kDelete
  std::string file;                // shard file name in the iteration dir, or "manifest"
  std::string chunk = "mid";       // first | mid | last chunk of that file
  uint64_t seed = 0;               // picks the byte and bit inside the chunk
};

struct DamageResult {
  std::string path;     // the damaged file
  std::string tensor;   // key of the tensor/object whose chunk was hit ("" for the manifest)
  std::string dataset;
  int64_t chunk = -1;
  uint64_t offset = 0;  // byte flipped, or new size after truncation
  std::string ToString() const;
};

// Damages iteration `iteration` (-1: the tracker's) under `root`.
Result<DamageResult> ApplyDamage(Env* env, const std::string& root, int64_t iteration, const DamageRequest& req);

}  // namespace ckpt::faults
