// Deadline checks (`ckpt faults deadline`): a rank that hangs (sleeps
// forever) or dies (SIGKILL) in a phase of a real multi-rank save or load must
// make every other rank fail within deadline + 1 s, each with a message naming
// that rank and the phase; a rank whose step fails (eio) must make every other
// rank fail at once (well within the deadline), naming it; nothing may be
// committed.
//
// OpenMPI kills the whole job when one rank dies, which would hide whether
// the survivors notice by themselves. The jobs therefore run under
// `mpirun --enable-recovery` (OpenMPI 4.1: the job keeps running after a
// process dies); every rank writes its outcome and the time it failed, the
// faulty rank logs when its fault fired, and the runner kills the job once
// all survivors have reported (the hung rank would never end). Latency =
// survivor's failure time - fault time (one monotonic clock on one machine).
//
// What is checked per scenario: every survivor failed; its latency <= the
// scenario's bound (BoundSeconds); its failure's typed fields (Status, as the
// child records them) name the faulty rank and the expected phase:
// hang/sigkill as a missing peer with its host in phase 'x' (rank 0's
// timeout, passed on to every other survivor; when F is 0 each survivor's
// own), eio as the origin rank F and phase 'x'; for saves, no iteration
// directory of the new iteration exists, the tracker still names the old one
// and the old checkpoint still loads bit for bit.
//
// Failure: an error Result only for setup problems (layout, baseline save,
// work dir); a scenario that does not hold lists its problems.
// Thread-compatible; runs child processes one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ckpt/base/status.h"
#include "faults/fault_spec.h"
#include "faults/jobs.h"

namespace ckpt::faults {

struct DeadlineScenario {
  std::string phase = "save";  // save | load
  std::string point;           // where the fault fires
  int rank = 0;
  int64_t nth = 1;
  Action action = Action::kHang;  // kHang, kSigkill or kEio
  Phase expect_phase = Phase::kNone;  // the phase every survivor must name
  std::string Name() const;
};

// The latest a survivor may fail after the fault, in seconds: hang/sigkill
// deadline + 1 s, or DecisionTimeout(deadline) + 1.25 s (1.25 x deadline +
// 1.25 s) when the faulty rank is 0 (survivors waiting for root's decision wait
// that long, then look on disk for a commit root may have made); eio deadline / 2
// (the error travels in the next gather: nobody waits a deadline for it).
double BoundSeconds(const DeadlineScenario& sc, int64_t timeout_ms);

// The default set for an 8-rank job: hangs and kills in begin, plan, write,
// fsync, vote and commit of a save (faulty rank 0 and others), and in a load;
// a failing plan step.
std::vector<DeadlineScenario> DefaultDeadlineScenarios(int world);

struct SurvivorReport {
  int rank = 0;
  bool failed = false;
  double latency_s = -1;
  std::string message;
  // The failure's typed fields (Status origin and missing peers).
  // The phases are parsed from the rank's JSON result (ParsePhase; a name no
  // phase has is kNone and so names nothing).
  int origin_rank = -1;
  Phase origin_phase = Phase::kNone;
  std::vector<int> missing_ranks;
  std::vector<std::string> missing_hosts;
  Phase missing_phase = Phase::kNone;
  bool names_rank_and_phase = false;  // some rank and some phase, typed
  bool names_faulty = false;          // the faulty rank (and its host if lost) and expect_phase
};

struct DeadlineResult {
  DeadlineScenario scenario;
  std::vector<SurvivorReport> survivors;
  double max_latency_s = 0, min_latency_s = 0;
  double bound_s = 0;
  bool committed = false;  // save: new iteration visible or tracker moved
  bool old_loads = true;
  std::vector<std::string> problems;  // empty: the scenario passed
};

struct DeadlineOptions {
  JobEnv job;                          // job.timeout_ms is the deadline under test
  std::vector<std::string> mpi_extra;  // added to --enable-recovery
  std::string work_dir;
  std::vector<DeadlineScenario> scenarios;  // empty: DefaultDeadlineScenarios
  int64_t old_iter = 10, new_iter = 20;
  std::function<void(const std::string&)> log;
};

Result<std::vector<DeadlineResult>> RunDeadlineChecks(const DeadlineOptions& opts);
std::string DeadlineTable(const std::vector<DeadlineResult>& results, int64_t timeout_ms);

// Parses the form DeadlineScenario::Name() prints:
//   "<save|load>:<hang|sigkill|eio>@<point>#<nth>:r<rank>=<expected phase>",
// e.g. "save:hang@step.vote#1:r5=vote".
Result<DeadlineScenario> ParseDeadlineScenario(const std::string& text);

}  // namespace ckpt::faults
