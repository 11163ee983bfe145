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
#include "ckpt/protocol/progress_session.h"

namespace ckpt::py {

// The session (ProgressSession) reporting to a Python callable.
class PyProgress : public ProgressSession {
 public:
  // callback None: inactive (env() is target, nothing is counted).
  PyProgress(const pyb::object& callback, std::string op, Env* target, bool count_writes,
             std::string file_suffix = ".h5");
  ~PyProgress();
  // Finish() (ProgressSession) is called without the GIL: it joins the reporter, which takes it.
};

}  // namespace ckpt::py
