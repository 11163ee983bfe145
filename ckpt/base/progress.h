// Progress of one long operation (save, load, verify, reshard, convert,
// fingerprint): counters the IO path bumps, a sink that shows them, and a
// reporter thread between the two.
//
// Where the bytes come from: every checkpoint byte goes through the Env
// (env.h), so MeterEnv - an EnvWrapper - counts the bytes its files read or
// write into a Progress. The library's IO code is untouched: a caller that
// wants progress passes a MeterEnv where it passed an Env (SaveOptions::env,
// LoadOptions::env, VerifyCheckpoint's env, ...). Counting is one relaxed
// atomic add per PRead/PWrite (no lock, no clock read): the chunk pipeline's
// hot path does not change.
//
// Totals are the caller's estimate (the manifest's file sizes for a read, the
// state's raw bytes for a save): stored bytes differ a little (HDF5
// metadata, compression, a file read twice), so a snapshot's total is never
// below its done (no "120 %"), and the final snapshot, emitted when the work
// has ended, has total = done: the last event says where it ended.
//
// Multi-rank: a Progress counts only the IO of its own process. The CLI and
// Python report rank 0's own progress (no collective is added to the IO
// path); rank 0's total is its own share.
//
// Thread-safety: Progress's counters are atomics (any thread adds); the phase
// is under a mutex (set a few times per operation). ProgressReporter calls its
// sink from its own thread only, never two calls at once.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "ckpt/base/env.h"

namespace ckpt {

struct ProgressSnapshot {
  std::string op;     // "save", "load", "verify", ...
  std::string phase;  // the operation's current step ("read", "write", ...); may be empty
  int64_t bytes_done = 0, bytes_total = 0;  // total 0: unknown
  int64_t files_done = 0, files_total = 0;
  double elapsed_s = 0;
  double rate = 0;    // bytes per second since the start
  double eta_s = -1;  // seconds left at that rate; -1: unknown (no rate or no total)
  bool final = false;  // the last snapshot of the operation
};

// The reporters' throttle: CKPT_PROGRESS_INTERVAL_MS (> 0) or 500 ms.
std::chrono::milliseconds ProgressIntervalFromEnvironment();

// Bytes per second and seconds left from the counts so far (-1: unknown).
double ProgressRate(int64_t bytes_done, double elapsed_s);
double ProgressEta(int64_t bytes_done, int64_t bytes_total, double elapsed_s);

class Progress {
 public:
  using Clock = std::chrono::steady_clock;
  explicit Progress(std::string op, Clock::time_point start = Clock::now()) : op_(std::move(op)), start_(start) {}

  void AddBytes(int64_t n) { bytes_.fetch_add(n, std::memory_order_relaxed); }
  void AddFile() { files_.fetch_add(1, std::memory_order_relaxed); }
  void SetTotals(int64_t bytes, int64_t files) {
    bytes_total_.store(bytes, std::memory_order_relaxed);
    files_total_.store(files, std::memory_order_relaxed);
  }
  void SetPhase(std::string phase);
  int64_t bytes_done() const { return bytes_.load(std::memory_order_relaxed); }
  int64_t files_done() const { return files_.load(std::memory_order_relaxed); }

  // The counts at `now` (totals raised to at least done; final: totals = done).
  ProgressSnapshot Snapshot(Clock::time_point now, bool final = false) const;

 private:
  const std::string op_;
  const Clock::time_point start_;
  std::atomic<int64_t> bytes_{0}, files_{0}, bytes_total_{0}, files_total_{0};
  mutable std::mutex mu_;
  std::string phase_;
};

// Where snapshots go: a terminal line, JSON lines, a Python callback.
class ProgressSink {
 public:
  virtual ~ProgressSink() = default;
  virtual void OnProgress(const ProgressSnapshot& s) = 0;
};

// Decides whether a snapshot is due: at most one per `interval`, and only
// when something moved (bytes, files or phase); the final one always.
class ProgressThrottle {
 public:
  explicit ProgressThrottle(std::chrono::milliseconds interval) : interval_(interval) {}
  bool Due(const ProgressSnapshot& s, Progress::Clock::time_point now);

 private:
  std::chrono::milliseconds interval_;
  bool any_ = false;
  Progress::Clock::time_point last_{};
  int64_t bytes_ = -1, files_ = -1;
  std::string phase_;
};

// Polls a Progress every `interval` on its own thread and hands due
// snapshots to the sink. Finish() (or the destructor) stops the thread and
// emits the final snapshot once. The sink must outlive the reporter.
class ProgressReporter {
 public:
  ProgressReporter(Progress* progress, ProgressSink* sink,
                   std::chrono::milliseconds interval = std::chrono::milliseconds(500));
  ~ProgressReporter() { Finish(); }
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;
  void Finish();

 private:
  void Loop();
  Progress* progress_;
  ProgressSink* sink_;
  ProgressThrottle throttle_;
  std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, finished_ = false;
  std::thread thread_;  // last: started once the members above exist
};

// An Env that counts into `progress` the bytes its files read (count_reads)
// and/or write (count_writes), and each distinct file path whose name ends
// in `file_suffix` (e.g. ".h5"; empty: every path) that moved bytes, once,
// when it is closed. Files opened through it must not outlive it.
class MeterEnv final : public EnvWrapper {
 public:
  MeterEnv(Env* target, Progress* progress, bool count_reads, bool count_writes, std::string file_suffix = "")
      : EnvWrapper(target), progress_(progress), reads_(count_reads), writes_(count_writes),
        suffix_(std::move(file_suffix)) {}
  Result<std::unique_ptr<File>> OpenFile(const std::string& p, OpenMode m, const OpenOptions& o = {}) override;

  // Counts only the files under directory `dir` whose names end in the file
  // suffix (bytes and files; set before use). A command that reads what it
  // wrote (reshard: the destination, each source manifest per target rank)
  // reports its source's bytes once, not its read-back.
  void CountOnlyUnder(std::string dir) { only_under_ = std::move(dir); }

  Progress* progress() const { return progress_; }
  bool reads() const { return reads_; }
  bool writes() const { return writes_; }
  void FileDone(const std::string& path);  // counts `path` once (close)

 private:
  Progress* progress_;
  const bool reads_, writes_;
  const std::string suffix_;
  std::string only_under_;  // empty: every file
  std::mutex mu_;
  std::set<std::string> done_;
};

}  // namespace ckpt
