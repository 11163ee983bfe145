// progress=callable of the Python API (save, load, verify, fingerprint,
// convert): the library's Progress (ckpt/base/progress.h) metering the
// operation's Env, reported to the callable with the GIL taken, at most every
// 0.5 s (CKPT_PROGRESS_INTERVAL_MS) and once at the end ("final": True,
// bytes_done == bytes_total). The callable gets one dict: op, phase,
// bytes_done, bytes_total, files_done, files_total, elapsed, rate (bytes/s),
// eta (s; -1 unknown), final. It runs on a reporter thread, never two calls at
// once; an exception it raises is printed as unraisable and stops the calls
// (the operation goes on). Multi-rank: each rank's callable sees its own IO.
//
// Use: construct with the GIL held, pass env() to the library call, call
// Finish() with the GIL released (it joins the reporter, which takes the GIL).
#pragma once

#include <memory>
#include <string>

#include "py_state.h"
#include "ckpt/base/progress.h"

namespace ckpt::py {

class PyProgress {
 public:
  // callback None: inactive (env() is target, nothing is counted).
  PyProgress(const pyb::object& callback, std::string op, Env* target, bool count_writes,
             std::string file_suffix = ".h5");
  ~PyProgress();
  Env* env() const { return meter_ ? meter_.get() : target_; }
  bool active() const { return meter_ != nullptr; }
  void SetTotals(int64_t bytes, int64_t files) { progress_.SetTotals(bytes, files); }
  // Totals from an iteration's manifest (-1: the latest); unreadable: unknown.
  void SetTotalsFromManifest(const std::string& root, int64_t iteration);
  void Finish();  // without the GIL

 private:
  Env* target_;
  Progress progress_;
  std::unique_ptr<ProgressSink> sink_;
  std::unique_ptr<MeterEnv> meter_;
  std::unique_ptr<ProgressReporter> reporter_;
};

}  // namespace ckpt::py
