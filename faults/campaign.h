// The fault campaign (`ckpt faults run`): prove the atomic commit in real
// multi-rank jobs.
//
//  1. baseline  a job saves the OLD iteration; a stale tmp dir and tracker
//               tmp are planted so the new save's GC has work to do;
//  2. trace     a job saves the NEW iteration over a copy, recording every
//               rank's IO trace; done twice to show the trace is stable;
//  3. replay    for every boundary (boundaries.h) x variant, a fresh copy of
//               the baseline and a real mpirun job that faults there;
//  4. recover   a fresh job loads the latest checkpoint (any layout) and
//               checks every element against the iteration it claims;
//  5. classify  old | new | error (clear, non-zero exit with a message) |
//               torn (loaded, values wrong) | lost (the commit had been
//               acknowledged, i.e. a rank reached step "commit", but recovery
//               is not the new checkpoint) | hang (no exit in time) | missed
//               (the fault never fired: the trace drifted).
//
// Variants. Jobs of their own: "powercut" (the rank cuts the power for the
// whole job; each run is judged four times: as the processes left the disk
// (a crash: page cache intact) and after ApplyPowerLoss in drop, prefix and
// torn mode), "crash" (_exit), "sigkill", "hang" (step boundaries only).
// Batched, many cases per mpirun because no process dies: "eio", "enospc",
// "eio-persist", "enospc-persist", "short" (pwrite boundaries), "delay".
// "damage": after a clean commit, bit flips (first/middle/last chunk), a
// truncation and a deletion of every shard file and the manifest; verify and
// the loader must detect each, naming file (and tensor and chunk for flips),
// and --fallback must return the old checkpoint bit for bit.
//
// Violations: torn, lost, hang, missed, and damage cases that failed or tore. With
// no_fsync (the negative control) Sync/SyncDir are no-ops in every job and
// the power-loss judgements are expected to find lost states.
//
// Failure: an error Result only for setup problems (bad options, the
// baseline or the fault-free traced save failing, IO in the work dir);
// everything a fault causes is a classified run. The work dir is wiped first
// (only if empty or made by an earlier run). Thread-compatible; runs child
// processes, one at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/base/status.h"
#include "faults/boundaries.h"
#include "faults/jobs.h"

namespace ckpt::faults {

struct CampaignOptions {
  JobEnv job;                         // ckpt binary, mpirun, model, layout, deadline, chunk size
  std::vector<std::string> mpi_extra; // extra mpirun flags for the campaign's jobs
  std::string work_dir;
  std::string recover_layout = "tp=1";
  std::vector<std::string> variants = {"powercut", "eio", "enospc-persist", "short", "damage"};
  std::vector<std::string> power_modes = {"drop", "prefix", "torn"};
  BoundaryRule rule = BoundaryRule::kSmart;
  std::set<std::string> points;       // empty: all
  std::set<int> ranks;                // empty: all
  int64_t old_iter = 10, new_iter = 20;
  bool no_fsync = false;
  // Negative control: every save (baseline, traces, runs) commits in place
  // (inplace_storage.h), so crashes leave an incomplete iter_N or an empty
  // tracker; recoveries are judged as usual.
  bool in_place_commit = false;
  uint64_t seed = 1;
  bool keep_runs = false;             // keep every run dir (violations are always kept)
  std::function<void(const std::string&)> log;  // progress and violation lines
};

enum class Outcome { kOld, kNew, kError, kTorn, kLost, kHang, kMissed };
std::string_view OutcomeName(Outcome o);
bool IsViolation(Outcome o);

struct RunRecord {
  std::string variant;  // "powercut/torn", "eio", ...
  Boundary boundary;
  Outcome outcome = Outcome::kError;
  bool acked = false;
  std::string detail;   // the recovery's error, mismatch or why it was missed
  std::string dir;      // the run directory (kept for violations)
};

struct VariantStats {
  std::string variant;
  std::set<std::string> points;
  std::set<int> ranks;
  int64_t runs = 0;
  std::map<Outcome, int64_t> counts;
  double seconds = 0;
};

// Per damage kind. A case fails unless verify and the loader both detect it
// and name what was hit, and --fallback returns the old checkpoint. `unread`
// counts cases the recovery layout's loader could not see because it reads
// no byte of the damaged chunk (vocab padding rows beyond its own padding,
// values unaffected); for those the loader's verdict is taken under the
// saved layout, which reads every chunk.
struct DamageStats {
  int64_t runs = 0, verify_detected = 0, verify_named = 0, load_detected = 0, load_named = 0, fallback_old = 0,
          undetected = 0, failed = 0, torn = 0, unread = 0;
};

struct CampaignReport {
  std::string layout, model, recover_layout, rule;
  int world = 0;
  int64_t old_iter = 0, new_iter = 0;
  bool no_fsync = false, in_place_commit = false;
  std::vector<int64_t> traced_ops;  // per rank
  int64_t boundaries = 0;
  bool trace_stable = true;
  std::string trace_difference;
  std::vector<VariantStats> variants;
  std::map<std::string, DamageStats> damage;  // by kind
  std::vector<RunRecord> notable;             // violations, then clear errors (capped)
  // Runs whose faulted job did not end within the limit once and were run
  // again (the second attempt's outcome is the one counted; a second timeout
  // is a hang). mpirun 4.1 has been seen to outlive ranks that had all ended.
  std::vector<std::string> reruns;
  double seconds = 0;

  int64_t Count(Outcome o) const;
  int64_t violations() const;
  std::string Table() const;
  nlohmann::json ToJson() const;
};

Result<CampaignReport> RunCampaign(const CampaignOptions& opts);

// The variant names RunCampaign accepts.
const std::vector<std::string>& KnownVariants();

}  // namespace ckpt::faults
