// Child processes for the campaign runner: run a command line (mpirun or a
// ckpt child) in its own process group with a wall-clock limit, output to
// files, and kill the whole group (mpirun and every rank) when the limit
// passes or the caller has seen enough.
//
// The calling process becomes a child subreaper (prctl), so ranks that
// outlive their mpirun are reparented to it and killed after each run.
//
// Failure: kInternal if fork/exec fails; a timeout is not an error (see
// ProcResult::timed_out). Thread-compatible (one call per thread).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "ckpt/base/status.h"

namespace ckpt::faults {

struct ProcOptions {
  double timeout_s = 60;
  std::string stdout_path;  // empty: /dev/null
  std::string stderr_path;  // empty: /dev/null
  // Polled while the process runs; once true the group is killed after
  // `grace_s` (the evidence is in, the rest would only wait for a hung rank).
  std::function<bool()> done_early;
  double grace_s = 0.2;
};

struct ProcResult {
  int exit_code = -1;    // when exited normally
  int signal = 0;        // when killed by a signal
  bool timed_out = false;
  bool stopped_early = false;  // killed because done_early said so
  double seconds = 0;
};

Result<ProcResult> RunProcess(const std::vector<std::string>& argv, const ProcOptions& opts);

// The path of the running executable (/proc/self/exe).
std::string SelfExe();

// Splits a command prefix ("mpirun --oversubscribe ...") on spaces.
std::vector<std::string> SplitWords(const std::string& s);

}  // namespace ckpt::faults
