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
// Concurrent saves and retention are not damage (the root may change while it
// is read): after a check, a directory that is gone (retention renames an
// iteration away before deleting it) was removed, not damaged. With iteration
// -1 a removed latest is verified again as the new latest (up to
// kVerifyAttempts times); a given iteration removed during its check is
// reported `removed`, without issues. A newer iteration whose manifest reads
// was committed after "latest" was resolved: a note, not an issue; one that
// does not read but is gone when looked at again was removed. Notes say what
// changed. Only damage that is still there when re-read is an issue.
//
// Thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"
#include "ckpt/storage/storage.h"

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
  // The iteration was removed (retention, another process) while it was
  // checked: what failed to read is not damage; `issues` is empty and
  // `notes` say what was seen. (With iteration -1 only after kVerifyAttempts.)
  bool removed = false;
  // Concurrent changes seen that are not damage ("iteration 12 was committed
  // while 11 was verified", "iteration 10 was removed ...").
  std::vector<std::string> notes;
  bool ok() const { return issues.empty(); }
};

// How often VerifyCheckpoint (latest) resolves "latest" again when the one it
// verified was removed meanwhile.
inline constexpr int kVerifyAttempts = 5;

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
// The same on an opened root (any backend; files read through storage->env()).
Result<VerifyReport> VerifyCheckpoint(Storage* storage, const VerifyOptions& opts);

// `ckpt verify --all`: every iteration listed under root, each checked as
// VerifyCheckpoint with that iteration (opts.iteration is ignored). One the
// listing showed but that is gone when its turn comes is `removed` (not an
// error). `latest` is what a load or `verify` of the latest would fail on
// before reading any chunk - a garbage tracker (kCorruption), a tracker naming
// an iteration that is not there (kNotFound) - so the three agree; resolved
// again like VerifyCheckpoint when the root changes under it.
struct IterationVerify {
  int64_t iteration = 0;
  Status error;         // the manifest could not be trusted (report unset)
  VerifyReport report;  // when error is OK
};
struct VerifyAllReport {
  std::vector<IterationVerify> iterations;
  Status latest;
  bool ok() const;
};
// kNotFound if root lists no iteration; the Env's error if it cannot be listed.
Result<VerifyAllReport> VerifyAllIterations(Env* env, const std::string& root, const VerifyOptions& opts);
Result<VerifyAllReport> VerifyAllIterations(Storage* storage, const VerifyOptions& opts);

}  // namespace ckpt
