// The building blocks of a commit, shared by SaveCheckpoint (one rank each,
// over a Comm) and the offline resharder (one process writing every rank's
// file in turn): prepare the tmp dir, write one rank's shard file, merge the
// per-rank indexes into a manifest, publish it atomically.
//
// The backend steps (staging, lease, publish, tracker) are the Storage's
// (ckpt/storage/storage.h); these functions add the protocol's checks.
// Failure: every function returns the first error; nothing is visible under
// the root until PublishCheckpoint passes the backend's commit point. Thread-safe
// as far as the Env is (distinct ranks may write concurrently).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/storage/storage.h"

namespace ckpt {

// Opens the checkpoint root `root` (a plain path or any registered URL:
// file://, mem://, s3://...) for the protocol. A plain path or file:// root
// does its IO through `env` (nullptr: DefaultEnv()); a root of another scheme
// through its backend's own Env (env is not used: the backend decides where
// its paths lead). Callers then read and write through the Storage's env() at
// JoinPath(root(), ...), never at paths joined onto the URL they were given.
// kInvalidArgument for an unknown scheme or a malformed URL; a backend's open
// error (an unreachable endpoint, bad credentials) names the URL.
Result<std::unique_ptr<Storage>> OpenRoot(Env* env, const std::string& root);
// The same (kept for callers that only list or read the tracker).
Result<std::unique_ptr<Storage>> OpenRootToList(Env* env, const std::string& root);

// Runs "begin", checks the iteration's range, stages the save
// (Storage::Stage: creates root if needed, deletes abandoned saves' staging
// areas, refuses an existing iteration or a live save of the same one with
// kAlreadyExists naming its owner) and, before creating anything, an
// iteration below the newest one under root unless allow_older
// (kFailedPrecondition saying why). The StagedSave holds the lease: keep it
// until the save ends; its dir() (POSIX "<root>/.iter_N.tmp-<host>-<pid>-<hex>")
// takes the rank files.
Result<std::unique_ptr<StagedSave>> PrepareSaveDir(Storage* storage, int64_t iteration, const StepHook& hook,
                                                   bool allow_older = false);
// The same on OpenRoot(env, root).
Result<std::unique_ptr<StagedSave>> PrepareSaveDir(Env* env, const std::string& root, int64_t iteration,
                                                   const StepHook& hook, bool allow_older = false);

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

// StagedSave::Publish of m's serialized form (POSIX: manifest tmp, fsync,
// rename, fsync dir, fsync tmp dir, rename it to iter_N without replacing,
// fsync root). OK: committed and durable. *published turns true once the
// iteration is visible (after that it must never be removed); an error
// after that (the root fsync) says it is visible but may not survive a crash.
// kInvalidArgument when m is not of the staged iteration.
Status PublishCheckpoint(StagedSave* staged, const Manifest& m, const StepHook& hook, bool* published);

// After PublishCheckpoint: points the tracker at `iteration`
// (Storage::WriteTracker; POSIX: tmp, fsync, rename, fsync root). Its
// failure does not undo the commit: the tracker then lags, and
// LatestIteration (checkpoint.h) still finds the iteration.
Status UpdateTracker(Storage* storage, int64_t iteration, const StepHook& hook);
Status UpdateTracker(Env* env, const std::string& root, int64_t iteration, const StepHook& hook);

}  // namespace ckpt
