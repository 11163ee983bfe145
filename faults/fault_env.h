// FaultEnv: an EnvWrapper (plus a File wrapper) that counts every Env call
// and protocol step of one rank, records them as an IO trace, and fires the
// FaultPlan's actions at the (point, rank, nth) they name.
//
// Points are the Env operations (env.open ... env.stat, fault_spec.h) and the
// SaveOptions::hook steps as "step.<name>" (install Hook()). A fault fires
// BEFORE the operation it is attached to: crash/sigkill/powercut/hang mean the
// call never starts, eio/enospc mean it fails without doing anything, short
// writes a prefix first, delay and the damage actions then let it proceed.
//
// Crash-type actions first append a line to the event log (so a runner knows
// what fired and when), then call `before_crash` (PowerLossEnv::Cut for a
// power cut), then end the process without any cleanup: _exit or SIGKILL.
// With plan.disable_sync, Sync and SyncDir are counted but not forwarded and
// report success (the negative control).
//
// Ownership: the FaultEnv does not own its target; Files it returns own the
// wrapped target File and must not outlive the FaultEnv.
// Thread-safety: as the Env contract (counters and trace under a mutex);
// actions run outside the mutex, so a hang blocks only its own thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/base/env.h"
#include "faults/fault_spec.h"

namespace ckpt::faults {

// One counted operation of one rank.
struct TraceEntry {
  int64_t seq = 0;    // position in the rank's sequence, from 1
  std::string point;  // "env.pwrite", "step.vote"
  int64_t nth = 0;    // occurrence of this point on this rank, from 1
  std::string path;   // file or directory ("" for steps)
  uint64_t offset = 0, bytes = 0;  // pwrite/pread/truncate
};

std::string TraceToJsonLines(const std::vector<TraceEntry>& trace);
Result<std::vector<TraceEntry>> TraceFromJsonLines(std::string_view text);

// Monotonic time in ns, comparable across the processes of one machine.
int64_t MonotonicNs();

class FaultEnv : public EnvWrapper {
 public:
  struct Options {
    int rank = 0;
    FaultPlan plan;
    std::string root;         // the checkpoint root, for damage actions
    int64_t iteration = -1;   // the iteration damage actions hit (-1: tracker's)
    std::function<void()> before_crash;  // runs before a crash-type action ends the process
    std::string event_log;    // if set, one JSON line per fired fault is appended (plain POSIX)
    bool record_trace = false;
  };

  FaultEnv(Env* target, Options opts);

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode,
                                         const OpenOptions& o = {}) override;
  Status CreateDir(const std::string& path) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status RenameNoReplace(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<FileInfo> Stat(const std::string& path) override;

  // A StepHook counting "step.<step>" and firing its rules; `chain` (if set)
  // runs first, e.g. to record that the commit was acknowledged.
  StepHook Hook(StepHook chain = nullptr);

  std::vector<TraceEntry> Trace() const;
  int64_t fired() const;  // faults fired so far (non-crash ones; crashes never return)

  // The decision for one call: Ok to proceed, or the injected error. Exits or
  // blocks for crash/hang. `keep` (short writes) gets the bytes to write first.
  Status Intercept(std::string_view point, const std::string& path, uint64_t offset, uint64_t bytes,
                   int64_t* keep = nullptr);
  bool sync_disabled() const { return opts_.plan.disable_sync; }

 private:
  Status Fire(const FaultRule& r, int64_t nth, const std::string& path, uint64_t bytes, int64_t* keep);
  void LogEvent(const FaultRule& r, int64_t nth, const std::string& path);

  Options opts_;
  mutable std::mutex mu_;
  std::map<std::string, int64_t> point_count_;
  std::vector<int64_t> rule_count_;
  std::vector<TraceEntry> trace_;
  int64_t seq_ = 0;
  int64_t fired_ = 0;
};

}  // namespace ckpt::faults
