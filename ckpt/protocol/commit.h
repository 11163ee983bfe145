// The building blocks of a commit, shared by SaveCheckpoint (one rank each,
// over a Comm) and the offline resharder (one process writing every rank's
// file in turn): prepare the tmp dir, write one rank's shard file, merge the
// per-rank indexes into a manifest, publish it atomically.
//
// Failure: every function returns the first error; nothing is visible under
// the root until PublishCheckpoint's directory rename succeeds. Thread-safe
// as far as the Env is (distinct ranks may write concurrently).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/base/dir_lock.h"
#include "ckpt/protocol/checkpoint.h"

namespace ckpt {

// Creates root if needed, deletes tmp dirs of abandoned saves (those whose
// lease nobody holds; live saves' are left alone), refuses an existing iter
// dir or a live save of the same iteration (kAlreadyExists naming its owner),
// refuses an iteration below the newest one under root unless allow_older
// (kFailedPrecondition saying why), creates a fresh
// "<root>/.iter_N.tmp-<host>-<pid>-<hex>", takes its lease into *lease (hold
// it until the save ends) and returns the path.
Result<std::string> PrepareSaveDir(Env* env, const std::string& root, int64_t iteration, const StepHook& hook,
                                   std::unique_ptr<DirLock>* lease, bool allow_older = false);

// Writes `tensors` (as main replicas) and `objects` into <tmp_dir>/rank_<r>.h5
// and fsyncs it, every chunk hashed with opts.hash. Returns a one-file partial
// manifest recording that hash (no file when both are empty). opts.direct_io:
// the file is written with direct IO (ShardFileWriter::Create); *stats (if
// given) gets the writer's statistics after Finish.
Result<Manifest> WriteRankFile(Env* env, const std::string& tmp_dir, int rank,
                               const std::vector<const TensorEntry*>& tensors,
                               const std::vector<const ObjectEntry*>& objects, const ShardWriteOptions& opts,
                               const StepHook& hook, ShardWriteStats* stats = nullptr);

// Joins per-rank partial manifests; checks that ranks agree on dtype and global
// shape, that every tensor is covered exactly once, that no object cell is
// written twice (errors name the tensor), and on the chunk hash (the merged
// manifest's).
Result<Manifest> MergeManifests(const std::vector<Manifest>& parts, int64_t iteration, const nlohmann::json& layout,
                                const nlohmann::json& metadata);

// manifest (tmp, fsync, rename, fsync dir), fsync tmp dir, rename it to iter_N
// without replacing, fsync root. OK: committed (the rename is durable).
// *published turns true once the directory is visible (after that it must
// never be removed); an error after that (the root fsync) says the directory
// is visible but may not survive a crash.
Status PublishCheckpoint(Env* env, const std::string& root, const std::string& tmp_dir, const Manifest& m,
                         const StepHook& hook, bool* published);

// After PublishCheckpoint: points the tracker at `iteration` (tmp, fsync,
// rename, fsync root). Its failure does not undo the commit: the tracker then
// lags, and LatestIteration (checkpoint.h) still finds the iteration.
Status UpdateTracker(Env* env, const std::string& root, int64_t iteration, const StepHook& hook);

}  // namespace ckpt
