// AsyncSaver: checkpoint saves whose only blocking part is a snapshot copy.
//
// Start() waits for the previous save of this saver (at most one in flight),
// copies every tensor and object of the state into host buffers owned by the
// saver (reused across saves; on a GPU these would be pinned), and returns;
// a background thread then runs the full SaveCheckpoint protocol on the
// snapshot, so training may overwrite its buffers at once. Wait() joins the
// background save and returns its result. A failure or crash in the
// background never publishes a partial checkpoint: the previous one stays
// latest (same commit protocol as a synchronous save).
//
// Collectives: the background thread uses the Comm given at construction,
// which must be dedicated to this saver (e.g. its own MpiComm duplicate) and
// safe to use from another thread (MPI_THREAD_MULTIPLE when the caller also
// uses MPI). Every rank must call Start/Wait in the same order.
// Thread-safety: one thread calls Start/Wait.
#pragma once

#include <future>
#include <memory>
#include <vector>

#include "ckpt/checkpoint.h"

namespace ckpt {

struct AsyncStartStats {
  double wait_previous_seconds = 0;  // blocked on the previous save
  double snapshot_seconds = 0;       // copying the state
  int64_t snapshot_bytes = 0;
  double blocking_seconds() const { return wait_previous_seconds + snapshot_seconds; }
};

class AsyncSaver {
 public:
  explicit AsyncSaver(Comm* comm);
  ~AsyncSaver();  // waits for a save in flight
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Snapshots `state` and starts saving it with `opts` (opts.comm is replaced
  // by the saver's). The previous save's error, if any, is returned here and
  // the new save is not started.
  Result<AsyncStartStats> Start(const ShardedStateDict& state, SaveOptions opts);
  // Joins the save in flight (if any) and returns its stats.
  Result<SaveStats> Wait();
  bool in_flight() const { return pending_.valid(); }

 private:
  Status Snapshot(const ShardedStateDict& state);

  Comm* comm_;
  std::vector<std::vector<std::byte>> buffers_;  // reused across saves
  ShardedStateDict snapshot_;
  std::future<Result<SaveStats>> pending_;
};

}  // namespace ckpt
