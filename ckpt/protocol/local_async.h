// AsyncLocalSaver: a local-tier save (local_tier.h) whose only blocking part
// is a copy of the state into host memory (Python's TieredCheckpointer).
//
// Start() joins the previous job of this saver (at most one in flight; its
// error is returned and the new save is not started), copies every tensor of
// `live` end to end into one arena owned by the saver (SnapshotMemory:
// faulted-in host memory, reused across saves, grown only when a state needs
// more) plus the objects' bytes, and returns. A background thread then runs
// LocalSave on the snapshot (own write, replication, local commit) and, when a
// global save is due, the drain: this rank's committed local copy read back
// (strict, chunk hashes checked) into the same arena - the snapshot is no
// longer needed then - and saved to the global root (DrainLocalCopy). So the
// memory held is one snapshot of the state, and training may overwrite its
// tensors as soon as Start returns. Wait() joins the job and returns its
// stats or its first error (typed: rank, phase, as LocalSave/SaveCheckpoint).
// A failed job never marks its local iteration complete nor commits its
// global one (the protocols' guarantees), so the previous ones stay usable.
//
// Collectives: the background thread uses local.comm (and drain->comm), which
// must be dedicated to this saver's background work (a duplicate of the job's
// comm) and usable from another thread. Every rank must call Start/Wait in
// the same order with the same iteration and drain decision.
// Thread-safety: one thread calls Start/Wait/Reserve and the accessors.
#pragma once

#include <chrono>
#include <future>
#include <optional>
#include <string>

#include "ckpt/protocol/local_tier.h"
#include "ckpt/protocol/snapshot_memory.h"

namespace ckpt {

// What a background job did (Wait, or the next Start's joined_previous).
struct LocalJobStats {
  int64_t iteration = -1;
  LocalSaveStats local;
  bool drained = false;      // a global save ran after the local one
  SaveStats drain;           // with drained: the global save's stats
  std::string drained_from;  // with drained: the local copy it was read from
  double background_seconds = 0;
};

struct LocalStartStats {
  double wait_previous_seconds = 0;  // blocked on the previous job
  double snapshot_seconds = 0;       // copying the state (allocation included)
  double allocate_seconds = 0;       // of snapshot_seconds: growing the arena (0 when reused)
  int64_t snapshot_bytes = 0;
  double blocking_seconds() const { return wait_previous_seconds + snapshot_seconds; }
  std::optional<LocalJobStats> previous;  // the job this Start joined (it succeeded)
};

class AsyncLocalSaver {
 public:
  explicit AsyncLocalSaver(SnapshotMemory* memory = nullptr);  // nullptr: HostSnapshotMemory()
  ~AsyncLocalSaver();                                          // waits for a job in flight
  AsyncLocalSaver(const AsyncLocalSaver&) = delete;
  AsyncLocalSaver& operator=(const AsyncLocalSaver&) = delete;

  // Snapshots `live` and starts local iteration `iteration` with `local`;
  // with `drain`, then the global save (drain->iteration is set to
  // `iteration`) from the committed local copy.
  Result<LocalStartStats> Start(const ShardedStateDict& live, int64_t iteration, const LocalTierOptions& local,
                                std::optional<SaveOptions> drain);
  // Joins the job in flight; FailedPrecondition when none is.
  Result<LocalJobStats> Wait();
  // The arena holds at least `bytes` (allocated and faulted in now); joins a
  // job in flight first (the arena is its snapshot), returning its error.
  Status Reserve(int64_t bytes);
  // The arena bytes a snapshot of `state` takes (alignment padding included).
  static int64_t ArenaBytes(const ShardedStateDict& state);
  bool in_flight() const { return pending_.valid(); }
  int64_t arena_capacity() const { return int64_t(arena_bytes_); }

 private:
  Status Snapshot(const ShardedStateDict& live, LocalStartStats* st);
  Status Grow(size_t bytes, double* seconds);

  SnapshotMemory* memory_;
  std::byte* arena_ = nullptr;
  size_t arena_bytes_ = 0;
  ShardedStateDict snapshot_;  // over arena_; read (and, by a drain, refilled) by the job only
  std::future<Result<LocalJobStats>> pending_;
};

}  // namespace ckpt
