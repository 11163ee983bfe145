// Progress of a long `ckpt` command (save, load, verify, reshard, convert,
// fingerprint) on stderr, stdout staying the command's report:
//  - stderr a terminal: one line, rewritten in place at most every 0.5 s
//    ("verify read: 412.3/1024.0 MB (40%), 3/8 files, 210.4 MB/s, ETA 3 s"),
//    ended by a newline when the command ends;
//  - --json: one JSON object per line on stderr, {"event": "progress", "op",
//    "phase", "bytes_done", "bytes_total", "files_done", "files_total",
//    "elapsed_s", "rate", "eta_s", "final"}; bytes_done never decreases and
//    the last event ("final": true) has bytes_done == bytes_total. stdout's
//    JSON report is unchanged; none when stderr is stdout's file (`2>&1`),
//    so a merged stream stays one parseable JSON document;
//  - otherwise (piped, redirected) and with --no-progress: nothing.
// Under mpirun only rank 0 reports, its own share (no collective is added).
// CKPT_PROGRESS_INTERVAL_MS overrides the 500 ms throttle (tests).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/progress.h"

namespace ckpt::cli {

class CliProgress {
 public:
  // op: the command ("verify"); json: --json; off: --no-progress; rank: this
  // process's. Meters `target` (reads or writes; files whose names end in
  // `file_suffix` count as files) when progress is shown.
  // start false: counts from now but reports from Start() on (an async save
  // whose meter must exist before the previous save's final line is out).
  CliProgress(std::string op, bool json, bool off, int rank, Env* target, bool count_writes,
              std::string file_suffix, bool start = true);
  ~CliProgress() { Finish(); }

  // The Env to hand to the library: the meter when progress is shown, else target.
  Env* env() const { return meter_ ? meter_.get() : target_; }
  bool active() const { return meter_ != nullptr; }
  void SetTotals(int64_t bytes, int64_t files) { progress_.SetTotals(bytes, files); }
  // Totals from an iteration's manifest (-1: the latest): its files' bytes and count.
  void SetTotalsFromManifest(const std::string& root, int64_t iteration);
  // Totals from several (root, iteration) manifests together (diff: both sides).
  void SetTotalsFromManifests(const std::vector<std::pair<std::string, int64_t>>& iterations);
  void SetPhase(std::string phase) { progress_.SetPhase(std::move(phase)); }
  // Meters only the files under `dir` with the file suffix (MeterEnv::CountOnlyUnder).
  void CountOnlyUnder(std::string dir) {
    if (meter_) meter_->CountOnlyUnder(std::move(dir));
  }
  void Start();  // starts reporting (no-op when shown already or not at all)
  // Stops the reporter and emits the final line/event (idempotent).
  void Finish();

 private:
  Env* target_;
  Progress progress_;
  std::unique_ptr<ProgressSink> sink_;
  std::unique_ptr<MeterEnv> meter_;
  std::unique_ptr<ProgressReporter> reporter_;
};

}  // namespace ckpt::cli
