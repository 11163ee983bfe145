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

#include <string>

#include "ckpt/base/env.h"
#include "ckpt/protocol/progress_session.h"

namespace ckpt::cli {

// The session (ProgressSession: meter, totals, reporter) with the sink the
// command's flags choose; inactive under --no-progress, on ranks other than 0,
// when piped, and with --json when stderr is stdout's file.
class CliProgress : public ProgressSession {
 public:
  // op: the command ("verify"); json: --json; off: --no-progress; rank: this
  // process's. Meters `target` (reads or writes; files whose names end in
  // `file_suffix` count as files) when progress is shown.
  // start false: counts from now but reports from Start() on (an async save
  // whose meter must exist before the previous save's final line is out).
  CliProgress(std::string op, bool json, bool off, int rank, Env* target, bool count_writes,
              std::string file_suffix, bool start = true);
};

}  // namespace ckpt::cli
