// Distributed save and load of a sharded state dict (the commit protocol).
//
// Save (every rank calls SaveCheckpoint with its own state dict and the same
// options except its Comm endpoint):
//  1. begin   rank 0 cleans abandoned tmp dirs (a live save's lease, a
//             DirLock on its tmp dir, protects it), refuses an existing iter
//             dir, a concurrent save of the same iteration and (unless
//             allow_older) an iteration below the newest one, creates
//             <root>/.iter_N.tmp-<host>-<pid>-<hex>/, holds its lease to the
//             end and broadcasts its name.
//  2. plan    descriptors (or a rank's failure: validate, the "plan" step)
//             are gathered on rank 0, which picks one writer for each
//             distinct shard among the ranks holding a replica of it
//             (largest first, least-loaded rank) and broadcasts the choice.
//  3. write   each rank writes its shards into rank_<r>.h5 and fsyncs it,
//             on a worker thread; meanwhile
//  4. vote    rounds (save_progress.h): each rank reports its write progress,
//             then ok + its shard index (or its error) to rank 0; a rank whose
//             writes stop for a deadline fails the save (kTimeout naming it).
//  5. commit  rank 0 checks coverage, writes manifest.json (tmp, fsync,
//             rename, fsync dir), fsyncs the tmp dir, renames it to iter_N
//             (never replacing one), fsyncs the root, then replaces the
//             tracker the same way; broadcasts the outcome.
// Any error or timeout on any rank before the dir rename aborts the save:
// nothing becomes visible and the previous checkpoint stays latest. When rank
// 0 times out on a rank in a gather (plan, vote, a load's agreement), it
// tells the others, so every survivor's error names that rank and phase.
// The commit point is the durable dir rename (root fsync done). An error
// between the rename and that fsync, or a rank that does not hear rank 0's
// outcome but sees the dir, is kOutcomeUnknown (maybe committed: look first). An error after it (tracker update, the "commit" step) does not
// fail the save: SaveStats::warning says what failed, the iteration is
// committed and LatestIteration finds it although the tracker lags. Fsync
// errors are never retried.
//
// Load: tracker -> iter dir -> manifest (self-hash verified) -> read plan
// (reshard/geometry/read_plan.h) -> chunks read once each, hash-checked, decoded and
// scattered into the requested buffers. Works for any layout change the
// descriptors express (TP/PP/DP, flat ranges, padded vocab).
//
// Thread-safety: one call per rank at a time; buffers belong to the caller.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/base/comm.h"
#include "ckpt/base/env.h"
#include "ckpt/format/manifest.h"
#include "ckpt/format/shard_file.h"
#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"
#include "ckpt/storage/storage.h"
#include "reshard/geometry/read_plan.h"

namespace ckpt {

// StepHook (ckpt/storage/storage.h): called at each named protocol step
// ("begin", "plan", "shard_write", "shard_fsync", "vote", "manifest_write",
// "manifest_rename", "dir_rename", "root_fsync", "tracker_update", "commit");
// a non-OK return fails the save at that point. faults/ uses it to crash,
// hang or fail a rank mid-protocol.

enum class NonFinitePolicy { kAllow, kWarn, kRefuse };
// A save refused under kRefuse because a tensor holds NaN/Inf fails on every
// rank with origin phase Phase::kNonFiniteGuard (Status::phase(); typed, not text).

struct SaveOptions {
  // The checkpoint root: a plain path or a URL (file://, s3://bucket/prefix,
  // mem://name; OpenRoot in commit.h). Unused when `storage` is set.
  std::string root;
  int64_t iteration = 0;
  Env* env = nullptr;    // a plain path's IO (nullptr: DefaultEnv()); a URL root uses its backend's
  // An opened root (e.g. a decorated backend in a test, or the non-atomic
  // in-place commit of the M115 negative control, faults/inplace_storage.h):
  // the save stages, writes and publishes through it (its env() at its
  // root()); root and env are then unused. Must outlive the call. nullptr:
  // root is opened here.
  Storage* storage = nullptr;
  Comm* comm = nullptr;  // nullptr: single process
  ShardWriteOptions write;
  Millis timeout{60000};  // per collective
  nlohmann::json layout = nlohmann::json::object();
  nlohmann::json metadata = nlohmann::json::object();
  bool balance_replicas = true;  // spread replicated shards over their holders
  NonFinitePolicy nonfinite = NonFinitePolicy::kAllow;
  // Save below the newest iteration under root (a restart in a used root):
  // refused (kFailedPrecondition at "begin") unless set, because "latest"
  // would still pick the newer, probably older-run, iteration.
  bool allow_older = false;
  StepHook hook;
};

struct SaveStats {
  int64_t iteration = 0;
  int64_t bytes_written = 0;     // this rank's raw tensor bytes
  int64_t file_bytes = 0;        // this rank's shard file size
  int64_t shards_written = 0;
  std::vector<int64_t> bytes_per_rank;  // rank 0 only: raw bytes each rank wrote
  std::map<std::string, double> phase_seconds;
  DirectIoStats direct_io;  // this rank's shard file (SaveOptions::write.direct_io)
  double seconds = 0;
  // OK, or what failed after the commit point ("tracker update failed: ..."):
  // the iteration is committed all the same (same on every rank for rank 0's
  // tracker update; a rank's own "commit" step failure only on that rank).
  Status warning;
};

Result<SaveStats> SaveCheckpoint(const ShardedStateDict& state, const SaveOptions& opts);

// Strict key handling at load (like Megatron-Core's StrictHandling): which
// key mismatches between the request and the checkpoint fail the load.
//  missing    = keys (tensor or object) this rank requested that the checkpoint
//               does not hold at all;
//  unexpected = keys the checkpoint holds that no rank requested (with a Comm,
//               the union over ranks: one extra AllGather, phase "strict").
// Both lists always come back in LoadStats. kNone / kUnexpected: missing
// requests are skipped (their buffers and objects untouched) and reported.
// kMissing / kAll: a missing key fails the load (kNotFound naming it) before
// any chunk is read. kUnexpected / kAll: unexpected keys fail it with
// kFailedPrecondition after the read (buffers may have been written), e.g.
// an 8-layer checkpoint loaded as a 4-layer model.
enum class StrictMode { kNone, kUnexpected, kMissing, kAll };
std::string_view StrictModeName(StrictMode mode);  // "none", "unexpected", "missing", "all"
Result<StrictMode> ParseStrictMode(std::string_view name);

struct LoadOptions {
  std::string root;        // a plain path or a URL, as SaveOptions::root
  int64_t iteration = -1;  // -1: the tracker's
  Env* env = nullptr;      // as SaveOptions::env
  Storage* storage = nullptr;  // an opened root, as SaveOptions::storage (root and env unused)
  Comm* comm = nullptr;    // when set, ranks agree on success (phase "load")
  Millis timeout{60000};
  bool verify_hashes = true;
  // On a failed attempt (any error but a Timeout: damage, a missing
  // iteration, a gap/shape/dtype the manifest describes) try the next older
  // committed iteration; LoadStats::skipped says what was skipped and why.
  // With fallback the HDF5 metadata hash of every file read is checked too
  // (the iteration loaded is one `verify` passes). A single-rank load of the
  // latest (either mode) whose iteration was removed meanwhile (retention)
  // resolves "latest" again: the root moved on, nothing was damaged.
  bool fallback = false;
  int threads = kAutoThreads;  // read/verify/decode workers of this rank (auto: DefaultWorkerThreads(comm))
  // Read-ahead: each worker keeps up to this many stored bytes of its next
  // chunks requested from the Env (File::WillNeed) while it hashes and decodes
  // the current one. 0 (default): off - the kernel's own sequential read-ahead
  // already overlaps each worker's front-to-back reads, and on the bench VM
  // (virtio disk, host cache) explicit WILLNEED of 8-32 MiB made loads from
  // evicted files up to 3x slower (ckpt_io_bench load; DESIGN "Load path").
  int64_t prefetch_bytes = 0;
  // How chunks are read (ChunkReader, env.h DirectRead). kOn: O_DIRECT, the
  // files' bytes go from the disk into each worker's aligned buffer, not
  // through the page cache (nothing of a large checkpoint is left there, and no
  // cache pages are allocated and copied): faster from a disk or a host cache,
  // slower when the files are in the page cache already. kAuto (the default
  // unless CKPT_DIRECT_IO is set): per file, buffered when it is mostly in the
  // page cache, else direct. kOff: buffered (DESIGN "Direct reads").
  DirectRead direct_io = DirectReadFromEnvironment();
  // Read sharing (load_share.h): ranks of this communicator (e.g. the DP
  // group, or the whole job) that need the same stored chunk read it once;
  // the reader checks its hash and sends the stored bytes to the others.
  // Collective over share_comm for every load attempt. nullptr or one rank: off.
  Comm* share_comm = nullptr;
  int64_t share_round_bytes = int64_t(64) << 20;  // bytes a rank sends per exchange round
  StrictMode strict = StrictMode::kMissing;  // the historical behaviour
};

struct LoadStats {
  int64_t iteration = 0;
  int64_t bytes_read = 0;   // stored bytes read
  int64_t chunks_read = 0;
  int64_t elements = 0;     // elements written into requested buffers
  int64_t zero_filled = 0;  // padded-vocab elements zero-filled
  int files_touched = 0;
  int64_t bytes_received = 0;  // read sharing: stored bytes other ranks read for this one
  int64_t bytes_sent = 0;      // read sharing: stored bytes this rank read for others
  int64_t chunks_received = 0;
  int share_rounds = 0;
  int64_t direct_read_bytes = 0;  // of bytes_read, read with O_DIRECT (LoadOptions::direct_io)
  std::string direct_io_fallback;  // why a direct load read through the page cache ("" if it did not)
  int files_cached = 0;  // DirectRead::kAuto: file opens (one per reader) read buffered, being in the page cache
  // Where the time went, summed over this rank's read workers (each runs on
  // its own thread, so these may add up to more than `seconds`): reading from
  // the Env, hashing, decoding, copying decoded chunks into the buffers.
  double read_seconds = 0, hash_seconds = 0, decode_seconds = 0, copy_seconds = 0;
  int threads = 0;  // read workers of this rank (LoadOptions::threads resolved)
  double seconds = 0;
  // Iterations passed over, each with why: with fallback, those rejected;
  // with iteration -1 (latest), also every committed-looking iteration newer
  // than the one loaded (a lagging tracker must not hide damage). Callers
  // should warn with these.
  std::vector<std::string> skipped;
  std::vector<std::string> missing_keys;     // requested by this rank, not in the checkpoint (sorted)
  std::vector<std::string> unexpected_keys;  // in the checkpoint, requested by no rank (sorted)
};

Result<LoadStats> LoadCheckpoint(ShardedStateDict& state, const LoadOptions& opts);

// A hint for a root that cannot be one, to append to a "not found" message:
// "; '<root>' is an iteration directory: pass its parent ..." (a user gave
// .../iter_0000012/), "; root ... is a file", "; root ... does not exist";
// "" for a directory.
std::string RootHint(Env* env, const std::string& root);
// The iteration the tracker names (kNotFound if there is none; kCorruption if garbage).
Result<int64_t> ReadTracker(Env* env, const std::string& root);
// What "latest" means: the newest committed iteration at or above the
// tracker's, so a save whose tracker update failed after the commit (the
// tracker lags) is still found. Committed = an iter_N dir whose manifest reads
// and verifies (ReadManifest); newer dirs that are not are skipped. No
// tracker: the newest committed iteration (kNotFound if none). A garbage
// tracker: its kCorruption (never guessed around). Reads only the manifests
// of dirs newer than the tracker. (ckpt/protocol/latest.cc)
Result<int64_t> LatestIteration(Env* env, const std::string& root);
// Committed iterations present under root, ascending.
Result<std::vector<int64_t>> ListIterations(Env* env, const std::string& root);
// Whether root holds the directory of `iteration` now. A reader that found a
// problem asks again: a directory gone by then was removed (retention renames
// an iteration away before deleting it; another process), not damaged. A
// failing Stat counts as present (never hides damage). (latest.cc)
bool IterationPresent(Env* env, const std::string& root, int64_t iteration);
// The manifest's shards as the read planner's input (chunk layout and stored sizes).
std::vector<reshard::SavedShard> SavedShardsOf(const Manifest& m);
// Reads and verifies the manifest of `iteration` (-1: latest): self-hash,
// every field (ParseManifest) and coverage (ValidateManifest), so loads check
// coverage as verify does.
Result<Manifest> ReadManifest(Env* env, const std::string& root, int64_t iteration);

// In the (Env*, root) forms a null env means the root's backend's own Env
// (a path: DefaultEnv(), made in the storage registry).
// The functions above on an opened root (OpenRoot, commit.h): the same
// contracts, IO through storage->env() at storage->root(), messages naming
// storage->url(). The (Env*, root) forms open `root` (any URL) and call these.
std::string RootHint(Storage* storage);
Result<int64_t> ReadTracker(Storage* storage);
Result<int64_t> LatestIteration(Storage* storage);
Result<std::vector<int64_t>> ListIterations(Storage* storage);
bool IterationPresent(Storage* storage, int64_t iteration);
Result<Manifest> ReadManifest(Storage* storage, int64_t iteration);
// The iteration directory of an opened root (an Env path of storage->env()).
std::string IterationDir(Storage* storage, int64_t iteration);

}  // namespace ckpt
