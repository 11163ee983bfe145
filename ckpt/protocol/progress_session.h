// ProgressSession: one operation's progress as the `ckpt` command and the
// Python API show it - a Progress (ckpt/base/progress.h), the sink it is
// reported to, a MeterEnv counting the bytes the library moves through the
// target Env, and the reporter thread. The front ends differ only in the sink
// they attach (terminal / JSON lines / a Python callable) and when.
//
// Until Attach the session is inactive: env() is the target and nothing is
// counted or reported. Totals from manifests are read through the target
// (unmetered); an unreadable manifest leaves the totals unknown (the
// operation reports its own error).
// Ownership: the target Env must outlive the session; files opened through
// env() must be closed before it ends.
// Thread-safety: construct, configure, Start and Finish on one thread; the
// meter is used by the library's threads, the sink called on the reporter's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/progress.h"

namespace ckpt {

class ProgressSession {
 public:
  ProgressSession(std::string op, Env* target) : target_(target), progress_(std::move(op)) {}
  ~ProgressSession() { Finish(); }
  ProgressSession(const ProgressSession&) = delete;
  ProgressSession& operator=(const ProgressSession&) = delete;

  // The Env to hand to the library: the meter when progress is shown, else the target.
  Env* env() const { return meter_ ? meter_.get() : target_; }
  bool active() const { return meter_ != nullptr; }
  void SetTotals(int64_t bytes, int64_t files) { progress_.SetTotals(bytes, files); }
  // Totals from an iteration's manifest (-1: the latest): its files' bytes and count.
  void SetTotalsFromManifest(const std::string& root, int64_t iteration) {
    SetTotalsFromManifests({{root, iteration}});
  }
  // Totals from several (root, iteration) manifests together (diff: both sides).
  void SetTotalsFromManifests(const std::vector<std::pair<std::string, int64_t>>& iterations);
  void SetPhase(std::string phase) { progress_.SetPhase(std::move(phase)); }
  // Meters only the files under `dir` with the file suffix (MeterEnv::CountOnlyUnder).
  void CountOnlyUnder(std::string dir) {
    if (meter_) meter_->CountOnlyUnder(std::move(dir));
  }
  // Starts reporting (no-op when reporting already or inactive).
  void Start();
  // Stops the reporter and emits the final line/event (idempotent).
  void Finish() {
    if (reporter_) reporter_->Finish();
  }

 protected:
  // Makes the session active: meters the target's writes (count_writes) or
  // reads, files whose names end in `file_suffix` counting as files, into
  // `sink`; reporting begins at Start().
  void Attach(std::unique_ptr<ProgressSink> sink, bool count_writes, std::string file_suffix);
  // Stops the reporter (its final report included) and drops the sink now:
  // for a front end that must do so under its own lock discipline (Python: without the GIL).
  void Detach() {
    reporter_.reset();
    sink_.reset();
  }
  bool reporting() const { return reporter_ != nullptr; }

 private:
  Env* target_;
  Progress progress_;
  std::unique_ptr<ProgressSink> sink_;
  std::unique_ptr<MeterEnv> meter_;
  std::unique_ptr<ProgressReporter> reporter_;
};

}  // namespace ckpt
