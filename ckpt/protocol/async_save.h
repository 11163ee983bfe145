// AsyncSaver: checkpoint saves whose only blocking part is a snapshot copy.
//
// Start() waits for the previous save of this saver (at most one in flight),
// copies every tensor and object of the state into one contiguous arena owned
// by the saver (from its SnapshotMemory: huge pages on the host, pinned with
// a GPU), and returns;
// a background thread then runs the full SaveCheckpoint protocol on the
// snapshot, so training may overwrite its buffers at once. Wait() joins the
// background save and returns its result. A failure or crash in the
// background never publishes a partial checkpoint: the previous one stays
// latest (same commit protocol as a synchronous save). Because the next
// Start joins the previous save first, two saves of one saver never
// interleave: they commit in Start order and the tracker ends at the last.
//
// Collectives: the background thread uses the Comm given at construction,
// which must be dedicated to this saver (e.g. its own MpiComm duplicate) and
// safe to use from another thread (MPI_THREAD_MULTIPLE when the caller also
// uses MPI). Every rank must call Start/Wait in the same order.
// The arena: tensors lie in state order, each at a 64-byte aligned offset
// unless its source directly follows the previous tensor's (then packed, so
// the copy of both is one block). It only grows: a save needing more than its
// capacity replaces it (allocation time is reported in allocate_seconds), a
// smaller one reuses it. Reserve() allocates it ahead of the first save, so
// that save blocks only for the copy.
// Thread-safety: one thread calls Start/Wait/Reserve and the accessors.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <vector>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/snapshot_memory.h"

namespace ckpt {

namespace testing {
class AsyncSaveControls;  // harness/async_controls.h: negative control and test hook
}  // namespace testing

struct AsyncSaveOptions {
  // Where the snapshot lives and how it is copied (ckpt/protocol/snapshot_memory.h);
  // nullptr = HostSnapshotMemory(). Pinned memory (ckpt/gpu/gpu.h) also takes
  // device-memory tensors. Not owned; must outlive the saver.
  SnapshotMemory* memory = nullptr;
};

struct AsyncStartStats {
  double wait_previous_seconds = 0;  // blocked on the previous save
  double snapshot_seconds = 0;       // copying the state
  int64_t snapshot_bytes = 0;        // bytes copied
  double allocate_seconds = 0;       // of snapshot_seconds: growing the arena (0 when reused)
  double blocking_seconds() const { return wait_previous_seconds + snapshot_seconds; }
  // Set when this Start joined a previous save (which then succeeded): that
  // save's stats (its background time: last_background_seconds()).
  bool joined_previous = false;
  SaveStats previous;
};

class AsyncSaver {
 public:
  explicit AsyncSaver(Comm* comm, AsyncSaveOptions opts = {});
  ~AsyncSaver();  // waits for a save in flight
  AsyncSaver(const AsyncSaver&) = delete;
  AsyncSaver& operator=(const AsyncSaver&) = delete;

  // Snapshots `state` and starts saving it with `opts` (opts.comm is replaced
  // by the saver's). The previous save's error, if any, is returned here and
  // the new save is not started.
  Result<AsyncStartStats> Start(const ShardedStateDict& state, SaveOptions opts);
  // Makes the arena hold at least `bytes` (ArenaBytes(state) for a state),
  // allocated and faulted in now. Waits for a save in flight first (the
  // arena is its snapshot) and returns that save's error, if any. No-op when
  // the arena is already as large.
  Status Reserve(int64_t bytes);
  // The arena bytes a snapshot of `state` needs (alignment padding included).
  static int64_t ArenaBytes(const ShardedStateDict& state);
  // Current arena capacity, and how many times it was (re)allocated.
  int64_t arena_capacity() const { return int64_t(arena_.bytes); }
  int arena_allocations() const { return arena_allocations_; }
  // Joins the save in flight (if any) and returns its stats.
  Result<SaveStats> Wait();
  bool in_flight() const { return pending_.valid(); }
  // True when no save is in flight or the one in flight has finished (Wait
  // then returns without blocking).
  bool finished() const {
    return !pending_.valid() || pending_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  }
  // Of the last joined save, measured in its background thread: the seconds
  // it spent there (0 before any join), and when it began SaveCheckpoint,
  // i.e. began reading the snapshot.
  double last_background_seconds() const { return last_background_seconds_; }
  std::chrono::steady_clock::time_point last_save_began() const { return last_save_began_; }
  const AsyncSaveOptions& options() const { return opts_; }

 private:
  friend class testing::AsyncSaveControls;  // the harness's switches, not product API
  Status Snapshot(const ShardedStateDict& state, double* allocate_seconds);

  struct Buffer {
    std::byte* data = nullptr;
    size_t bytes = 0;
  };

  Comm* comm_;
  AsyncSaveOptions opts_;
  SnapshotMemory* memory_;
  // Harness only (testing::AsyncSaveControls): false = no snapshot (the
  // negative control: the background save reads the live buffers); a
  // function the background thread runs before SaveCheckpoint.
  bool copy_snapshot_ = true;
  std::function<void()> before_save_;
  Status GrowArena(size_t bytes);
  Buffer arena_;  // from memory_, reused across saves; grows only
  int arena_allocations_ = 0;
  ShardedStateDict snapshot_;
  std::future<Result<SaveStats>> pending_;
  // Written by the background thread, read only after the join (the
  // future's get() orders the two), then copied into the last_* values.
  double background_seconds_ = 0;
  std::chrono::steady_clock::time_point save_began_{};
  double last_background_seconds_ = 0;
  std::chrono::steady_clock::time_point last_save_began_{};
};

// The baseline async blocking time is judged against: the median of `reps`
// memcpys of every tensor of `state`, one after the other, into `dst` (at
// least the tensors' total bytes). With `comm`, every rank starts each copy
// after a barrier (as the snapshots of a job run: all ranks at once, sharing
// the memory bandwidth); nullptr times this process alone.
Result<double> MedianStateMemcpySeconds(const ShardedStateDict& state, std::span<std::byte> dst, int reps,
                                        Comm* comm = nullptr, Millis timeout = Millis(60000));

}  // namespace ckpt
