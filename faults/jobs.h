// Jobs for the campaign and deadline runners: `ckpt faults child` ranks under
// mpirun, the recovery load and its verdict, and cheap copies of checkpoint
// trees.
//
// Every job runs in its own process group with a wall-clock limit (a hung
// job is killed, never waited for). Output goes to files next to the run so
// a failing run can be read afterwards.
//
// Failure: Status for setup problems (cannot spawn, cannot copy); a child
// that fails is a result, not an error. Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/base/status.h"
#include "faults/process.h"

namespace ckpt::faults {

struct JobEnv {
  std::string ckpt;                  // the ckpt executable
  std::vector<std::string> mpirun;   // prefix before "-np N"
  std::string model = "tiny";
  std::string layout = "tp=2,pp=2,dp=2";
  int64_t timeout_ms = 2000;         // collective deadline inside the jobs
  int64_t chunk_kb = 16;
  bool verify_hashes = true;         // recovery loads check chunk hashes (off: checker negative control)
};

// World size of a layout spec (tp*cp*dp*pp); 0 if it does not parse.
int WorldOf(const std::string& layout);

// The default mpirun prefix: $CKPT_MPIRUN or $MPIRUN, else a local one that
// works as root, oversubscribed, over shared memory only.
std::vector<std::string> DefaultMpirun();

// Runs `ckpt faults child <args>` under mpirun with the job's world size
// (`mpi_extra` goes between the prefix and -np). stdout/stderr go to
// `log_prefix`.out / .err.
Result<ProcResult> RunChildJob(const JobEnv& env, const std::vector<std::string>& args,
                               const std::string& log_prefix, double timeout_s,
                               const std::vector<std::string>& mpi_extra = {},
                               std::function<bool()> done_early = nullptr);

// What a recovery load found.
struct Recovery {
  bool hung = false;
  bool ok = false;
  int64_t iteration = -1;
  int64_t mismatches = 0;
  std::string first_bad, error;
  std::vector<std::string> skipped;  // fallback: iterations rejected
};

// Loads the latest checkpoint under `root` into `layout` (world 1: a plain
// process, no MPI; else mpirun) and checks every element against the
// iteration it claims to be.
Result<Recovery> RecoverLatest(const JobEnv& env, const std::string& layout, const std::string& root, bool fallback,
                               const std::string& log_prefix);

// Copies the tree `src` to `dst` (which must not exist). Files for which
// `link(relative path)` is true are hard-linked instead of copied: only for
// files nothing will modify in place.
Status CloneTree(const std::string& src, const std::string& dst,
                 const std::function<bool(const std::string&)>& link = nullptr);
Status RemoveAll(const std::string& path);
// Empties `dir` for a run: creates it, or wipes it if it is empty or was made
// by an earlier run (holds the ".ckpt-faults-work" marker or a "baseline"
// dir); refuses otherwise.
Status PrepareWorkDir(const std::string& dir);

// Parses a file of JSON lines (missing file: empty).
std::vector<nlohmann::json> ReadJsonLines(const std::string& path);
bool PathExists(const std::string& path);

}  // namespace ckpt::faults
