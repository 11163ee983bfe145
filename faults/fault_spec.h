// Fault plans: which injection point fires which action, on which rank, at
// which call. A plan is written as text (a --spec string or a spec file):
//
//   point=env.fsync rank=1 nth=2 action=eio persistent
//   point=step.vote rank=3 action=sigkill          # '#' starts a comment
//   point=env.pwrite path=rank_00002 nth=5 action=short bytes=100
//   nosync                                          # negative control switch
//
// Rules are separated by newlines or ';', tokens by spaces or ','. Keys:
//   point   an injection point (EnvPoints(), StepPoints()); required
//   rank    the rank it fires on (default: every rank)
//   nth     fires at the nth matching call on that rank, 1-based (default 1)
//   path    only calls whose path contains this substring count
//   action  crash | sigkill | powercut | eio | enospc | short | delay | hang |
//           bitflip | truncate | delete; required
//   persistent  eio/enospc: also every later matching call (a dead disk);
//               delay: every later matching call is slow too (a slow disk)
//   ms      delay length (default 100)
//   bytes   short write: bytes kept (default: half the write)
//   file    damage target in the committed iteration dir (default: the
//           firing rank's shard file; "manifest" for the manifest)
//   chunk   damage position: first | mid | last chunk of that file
// The bare word `nosync` turns File::Sync and Env::SyncDir into no-ops that
// report success (a lying disk): the power-loss negative control.
//
// Pure (no IO except LoadFaultPlanFile); thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"

namespace ckpt::faults {

enum class Action {
  kCrash,      // _exit without cleanup (no atexit, no flush of stdio, no MPI_Finalize)
  kSigkill,    // SIGKILL to itself
  kPowerCut,   // machine-wide power cut (PowerLossEnv::Cut), then _exit
  kEio,        // the call fails with kIOError and does nothing
  kEnospc,     // the call fails with kNoSpace and does nothing
  kShortWrite, // env.pwrite: writes a prefix, then fails with kNoSpace
  kDelay,      // sleeps `ms`, then proceeds
  kHang,       // sleeps forever
  kBitFlip,    // after-commit damage: flips one bit inside a stored chunk
  kTruncate,   // after-commit damage: cuts the file inside that chunk
  kDelete,     // after-commit damage: removes the file
};

struct FaultRule {
  std::string point;
  int rank = -1;  // -1: every rank
  int64_t nth = 1;
  bool persistent = false;
  std::string path;
  Action action = Action::kCrash;
  int64_t ms = 100;
  int64_t bytes = -1;
  std::string file;
  std::string chunk = "mid";

  std::string ToString() const;  // parses back to an equal rule
};

struct FaultPlan {
  std::vector<FaultRule> rules;
  bool disable_sync = false;

  std::string ToString() const;
};

// Process exit status of the crash and power-cut actions (and of ranks that
// stop because another rank cut the power), so runners can tell them apart.
inline constexpr int kCrashExitCode = 86;
inline constexpr int kPowerCutExitCode = 87;

std::string_view ActionName(Action a);
Result<Action> ParseAction(std::string_view name);
bool IsDamage(Action a);

// Env operations ("env.open", "env.pwrite", ...) and protocol steps
// ("step.begin", ... "step.commit", the SaveOptions::hook steps).
const std::vector<std::string>& EnvPoints();
const std::vector<std::string>& StepPoints();
// The local tier's own steps (ckpt/protocol/local_tier.h; its own write also
// passes StepPoints()): kept apart so the global campaign does not list them.
const std::vector<std::string>& LocalTierStepPoints();
bool IsKnownPoint(std::string_view point);

Result<FaultPlan> ParseFaultPlan(std::string_view text);
Result<FaultPlan> LoadFaultPlanFile(Env* env, const std::string& path);

}  // namespace ckpt::faults
