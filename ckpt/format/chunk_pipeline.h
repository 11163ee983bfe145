// ChunkPipeline: the bounded worker pool behind ShardFileWriter's pipelined
// save (shard_file.h). Workers prepare chunks (pad, encode, hash); the calling
// thread consumes them (HDF5 direct chunk write + Env IO) in index order.
//
// Run(n, prepare, consume) calls prepare(i) for every i in [0, n) on the
// pool's workers and consume(i) on the calling thread in order 0, 1, ..., each
// as soon as prepare(i) has returned. At most window() indices are handed to
// prepare but not yet fully consumed (the one being consumed included): that
// is the memory bound. A caller keeps per-index results in window() slots,
// slot i % window(): prepare(i + window()) never starts before consume(i) has
// returned, and everything prepare(i) wrote is visible to consume(i) (both
// hand-overs go through the pool's mutex).
//
// Failure: the first non-OK Status (or exception, as kInternal) from a
// prepare or a consume stops the run: no further prepare is handed out, Run
// waits until the prepares already running have returned (they read the
// caller's buffers) and returns that Status; unconsumed results are dropped.
// Prepares must return on their own (they are pure computation); given that,
// every wait ends: the caller waits only for a prepare that is running or
// that an idle worker can take at once (index i is always inside the window
// while the caller waits for it), workers wait only for work. Results do not
// depend on the number of threads: prepare(i) sees the same inputs and
// consume runs in index order on one thread.
//
// Serial mode: with 0 threads (or n == 1, to spare a hand-off for the many
// single-chunk tensors) Run calls prepare(i) then consume(i) on the caller.
//
// Threads: Run is called by one thread at a time (the owning writer's); the
// constructor starts the workers (fewer if the system refuses threads: at
// worst serial), the destructor stops and joins them. Not copyable.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "ckpt/base/status.h"

namespace ckpt {

class ChunkPipeline {
 public:
  using Step = std::function<Status(int64_t index)>;

  explicit ChunkPipeline(int threads);  // threads <= 0: serial
  ~ChunkPipeline();
  ChunkPipeline(const ChunkPipeline&) = delete;
  ChunkPipeline& operator=(const ChunkPipeline&) = delete;

  int threads() const { return int(workers_.size()); }
  int requested_threads() const { return requested_; }
  // Indices in flight at most: 2 per worker (one being prepared, one ready), >= 1.
  int64_t window() const { return window_; }
  // The most indices in flight seen by any Run so far (tests check the bound).
  int64_t peak_in_flight() const;

  Status Run(int64_t n, const Step& prepare, const Step& consume);

 private:
  struct Job;

  Status RunSerial(int64_t n, const Step& prepare, const Step& consume);
  bool CanHandOut() const;  // mu_ held
  void WorkerLoop();

  const int requested_;
  int64_t window_ = 1;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // workers: a job index may be handed out, or stop
  std::condition_variable done_cv_;  // caller: a prepare returned
  Job* job_ = nullptr;               // the running Run's state, owned by Run's frame
  bool stop_ = false;
  int64_t peak_ = 0;
  std::vector<std::thread> workers_;  // last: started once the members above exist
};

}  // namespace ckpt
