// VerifyCheckpoint: re-reads and re-hashes every byte of a committed checkpoint.
//
// Checks, in order: tracker (when no iteration is given), manifest self-hash,
// every shard file present with the recorded size, every chunk of every tensor
// shard and object against its SHA-256, every chunk decodable, the HDF5
// structure of each file (it opens and holds the datasets the manifest names),
// and coverage (each tensor tiled exactly once by its shards). Problems are
// reported with file, tensor, dataset and chunk; the report says ok() only when
// there are none. A manifest that cannot be trusted is an error Result.
// Chunk reads follow VerifyOptions::direct_io (env.h DirectRead); the HDF5
// metadata and structure checks read through the page cache.
// With iteration -1 (latest), every committed-looking iteration newer than
// the one verified (whose manifest does not read, so "latest" passed it over,
// e.g. behind a lagging tracker) is reported as an issue too.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"

namespace ckpt {

struct VerifyIssue {
  std::string file;     // path, may be empty for manifest-level problems
  std::string tensor;   // tensor or object key, may be empty
  std::string dataset;
  int64_t chunk = -1;
  std::string problem;
  std::string ToString() const;
};

struct VerifyReport {
  int64_t iteration = 0;
  int64_t files_checked = 0;
  int64_t chunks_checked = 0;
  int64_t bytes_checked = 0;
  int64_t direct_read_bytes = 0;  // of the chunk reads, read with O_DIRECT (VerifyOptions::direct_io)
  int files_cached = 0;           // DirectRead::kAuto: files read buffered, being in the page cache
  double seconds = 0;
  std::vector<VerifyIssue> issues;
  bool ok() const { return issues.empty(); }
};

struct VerifyOptions {
  int64_t iteration = -1;  // -1: the tracker's
  bool stop_at_first = false;
  bool check_hdf5 = true;
  // How chunks are read, as LoadOptions::direct_io: by default per file,
  // O_DIRECT unless at least half of it is in the page cache (decided when the
  // file is first opened, before the metadata check reads it buffered).
  DirectRead direct_io = DirectReadFromEnvironment();
};

Result<VerifyReport> VerifyCheckpoint(Env* env, const std::string& root, const VerifyOptions& opts);

}  // namespace ckpt
