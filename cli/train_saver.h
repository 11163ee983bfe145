// TrainSaver: how `ckpt train` saves - synchronously (SaveCheckpoint on the
// job's communicator, training waits for the commit) or, with --async-save,
// through an AsyncSaver (ckpt/protocol/async_save.h) on a dedicated communicator, so
// training continues right after the snapshot copy.
//
// Async contract:
//  - needs MPI_THREAD_MULTIPLE: the background thread runs the save's
//    collectives (plan, vote, commit) on its own MpiComm duplicate while the
//    training thread runs its all-reduces; Create fails clearly otherwise;
//  - at most one save in flight: Save() of the next iteration first joins the
//    previous one (its wait is reported as wait_previous_seconds);
//  - Finish() joins the save in flight; the job calls it before it exits and
//    before --kill-after-save kills it, so no acknowledged save is lost;
//  - a background failure is returned by the next Save() or by Finish().
// Snapshot memory: host (heap) or pinned (cudaHostAlloc, the GPU path; fails
// clearly without a GPU or in a build without CUDA).
// ckpt-lab's switches (harness AsyncSaveControls through cli/harness_seam.h,
// never defaults): --async-no-snapshot (the negative control: the background
// save reads the live training buffers) and --async-delay-ms (a test hook).
// Retention (--save-retain-interval K, --keep-last N): after a save has
// committed durably (sync: SaveCheckpoint returned; async: at its join),
// rank 0 deletes the older iterations the policy drops (ApplyRetention:
// never the newest, only once the tracker names it); a retention error is a
// log line, never a failed save.
// Faults (ckpt-lab): with a fault plan (--faults, faults/fault_spec.h) every
// save goes through one fault Env + step hook for the whole job, so "nth" counts over
// saves (nth=2 of step.shard_write: the second save).
//
// Per async save the row has: wait_previous_seconds + snapshot_seconds =
// blocking_seconds (the training thread's stall), snapshot_bytes,
// background_seconds (the whole background save, delay included),
// save_seconds (SaveCheckpoint alone), steps_before_read (training steps that
// ended before the background save began reading) and steps_until_join.
// Report(): the saves as JSON rows (rank 0's numbers, plus the worst rank's
// blocking time, gathered over the job) and, for async, a memcpy baseline of
// the same bytes measured in this process. Collective: every rank calls it.
// Thread-safety: one thread (the training thread) calls every method.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/async_save.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/local_async.h"
#include "ckpt/protocol/local_tier.h"
#include "ckpt/protocol/retention.h"
#include "ckpt/mpi/comm_mpi.h"
#include "ckpt/workload/train_loop.h"
#include "cli/harness_seam.h"
#include "cli/progress.h"

namespace ckpt::cli {

struct TrainSaveFlags {
  bool async = false;
  bool no_snapshot = false;  // negative control (needs async)
  int64_t delay_ms = 0;      // test hook (needs async)
  std::string snapshot_memory = "host";  // host or pinned (the GPU path, ckpt/gpu/gpu.h)
  std::string faults;        // fault plan text (faults/fault_spec.h), "" = none
  std::string faults_log;    // event log of fired faults (one JSON line each)
  std::string hash = "sha256";  // chunk hash of the saves (ckpt/base/chunk_hash.h names)
  RetentionPolicy retention; // after each committed save, rank 0 deletes what the policy says (retention.h)
  // The local tier (ckpt/protocol/local_tier.h; cli/train_local.cc): every
  // local_every iterations a local save (own copy + replicas + local commit);
  // the global saves (--save-every, --steps) then drain from that copy. With
  // --async-save the local save blocks only for a copy of the state into host
  // memory; write, replication, commit and the drain run in the background
  // (SaveLocalAsync); without it all of that is synchronous.
  std::string local_dir;     // "" = one tier
  int64_t local_every = 0;
  int replicas = 1;
  int ranks_per_node = 0;    // 0: the MPI launcher's local size
  int64_t kill_at = -1;      // ckpt-lab --kill-at: SIGKILL every rank after the saves of this iteration
  int64_t stall_at = -1;     // ckpt-lab --stall-at: every rank waits (300 s at most) after the saves of this iteration
  // Progress of each save on rank 0's stderr (cli/progress.h): a terminal
  // line, JSON lines with --json, nothing when piped or with --no-progress.
  // An async save's progress is its background write, ended at its join.
  bool json = false, no_progress = false;
};

class TrainSaver final : public workload::TrainCheckpointer {
 public:
  // Collective over `job` (duplicates MPI_COMM_WORLD for an async saver).
  static Result<std::unique_ptr<TrainSaver>> Create(const TrainSaveFlags& f, const MpiSession& session,
                                                    MpiComm& job, const std::string& root);

  // Saves `sd` (sync), or joins the previous async save and starts this one.
  // `iteration_now` is the training iteration at this call (for steps_during_save).
  // Returns one line for the log.
  Result<std::string> Save(const ShardedStateDict& sd, SaveOptions o, int64_t iteration_now);
  // The training loop's checkpointer (workload::TrainCheckpointer): saves the
  // workload's SaveDict(parts) with `base` (root, policy, compression,
  // metadata) at its current iteration. An async saver allocates its snapshot
  // arena for that state here (AsyncSaver::Reserve, at job start), so that the
  // first save blocks for the copy only, not for mapping and faulting in
  // fresh memory (on the bench VM 30x the copy). Errors: the allocation's.
  Status Prepare(SaveOptions base, workload::ResumeParts parts, workload::TrainWorkload& w);
  Result<std::string> Save(workload::TrainWorkload& w) override;
  // Joins the async save in flight (no-op otherwise). Returns a log line ("" if nothing joined).
  Result<std::string> Finish(int64_t iteration_now) override;
  // The training thread finished a step: with a save in flight, its time is
  // kept, so a join can tell how many steps overwrote the training buffers
  // before the background save began reading (steps_before_read).
  void OnStep() override;
  // Collective. `sd` is the state (for the memcpy baseline).
  Result<nlohmann::json> Report(const ShardedStateDict& sd, Millis timeout);

  bool async() const { return saver_ != nullptr; }
  // Whether iteration `it` is due for a global save (set by the caller; the
  // loop asks Save at local and global iterations both).
  void SetGlobalDue(std::function<bool(int64_t)> due) { global_due_ = std::move(due); }
  // The local tier's options (after Prepare), nullptr without --local-dir.
  const LocalTierOptions* local() const { return local_ ? &*local_ : nullptr; }

 private:
  TrainSaver(TrainSaveFlags f, MpiComm* job) : flags_(std::move(f)), job_(job) {}
  std::string Joined(const SaveStats& st, int64_t iteration_now);
  // Rank 0, after `st`'s save committed: applies the retention policy (never
  // when the commit carries a warning: the tracker may lag); a log line.
  std::string Retain(const SaveStats& st);
  // cli/train_local.cc
  Status PrepareLocal();
  Result<std::string> SaveLocal(workload::TrainWorkload& w);
  // The global save of iteration N from this rank's local copy (no second
  // snapshot of training memory): loaded into drain_ buffers, then saved on
  // the dedicated communicator in the background (async) or here (sync).
  Result<std::string> DrainGlobal(workload::TrainWorkload& w);
  Result<std::string> JoinDrain(int64_t iteration_now);
  // The drain of the workload's current iteration from this rank's local
  // copy, on `comm` (prepares drain_sd_; run it once).
  std::function<Result<SaveStats>()> MakeDrain(workload::TrainWorkload& w, Comm* comm);
  // --async-save: the local save as a snapshot, written, replicated and
  // committed (then the global drain, if due) in the background; JoinLocal
  // joins it (no-op if none) and returns its log lines or its error.
  Result<std::string> SaveLocalAsync(workload::TrainWorkload& w, bool global);
  Result<std::string> JoinLocal(int64_t iteration_now);
  Status KillIfAsked(int64_t it);

  // Progress of the save `sd` through `*env` (rank 0); *env becomes its meter.
  std::unique_ptr<CliProgress> Meter(const char* op, const ShardedStateDict& sd, Env** env, bool start) const;

  TrainSaveFlags flags_;
  std::unique_ptr<CliProgress> async_progress_;  // the async save in flight's (its drain writes through it)
  SaveOptions base_;
  workload::ResumeParts parts_;
  MpiComm* job_;
  std::unique_ptr<MpiComm> save_comm_;  // async: the saver's own communicator
  std::unique_ptr<SnapshotMemory> memory_;  // async with pinned memory (outlives saver_)
  std::unique_ptr<AsyncSaver> saver_;
  FaultedEnv faulted_;  // --faults (ckpt-lab): one fault Env and step hook for every save
  nlohmann::json rows_ = nlohmann::json::array();
  int64_t pending_row_ = -1;  // async: row of the save in flight
  int64_t started_at_ = 0;    // iteration when it started
  double reserve_seconds_ = 0;  // async: Prepare's arena allocation
  std::vector<std::chrono::steady_clock::time_point> steps_;  // step ends since it started
  std::optional<LocalTierOptions> local_;
  std::function<bool(int64_t)> global_due_;
  std::vector<std::byte> drain_buf_;   // the drain's copy of the state (read from the local tier)
  ShardedStateDict drain_sd_;
  std::future<Result<SaveStats>> drain_;
  int64_t drain_row_ = -1;
  // --async-save with the local tier: the snapshot and its background job
  // (ckpt/protocol/local_async.h, the one Python's TieredCheckpointer uses).
  std::optional<AsyncLocalSaver> local_async_;
  int64_t local_row_ = -1, local_drain_row_ = -1;
};

}  // namespace ckpt::cli
