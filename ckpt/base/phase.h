// Phase: the one spelling of a protocol phase - the step of a save, load,
// resume or job in which ranks meet (a Comm call) or a failure began
// (Status::phase(), MissingPeers::phase).
//
// Code decides on the enum (exit codes, fault verdicts, which failure to
// report); the text form exists only at the edges: messages ("in phase
// 'vote'"), the status wire (status_wire.h), result JSON and Python. Adding a
// phase = one enumerator + one row of the name table in phase.cc.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ckpt {

enum class Phase : uint8_t {
  kNone = 0,  // no phase recorded
  // save (ckpt/protocol/save.cc)
  kValidate,
  kBegin,
  kPlan,
  kWrite,
  kVote,
  kCommit,
  kNonFiniteGuard,  // a save refused because the state holds NaN/Inf
  kMemcpyBaseline,  // async save's memcpy reference
  // load
  kLoad,
  kLoadShare,
  kStrict,
  // local tier (ckpt/protocol/local_tier.cc)
  kLocalWrite,
  kLocalReplicate,
  kLocalReceive,
  kLocalCommit,
  kLocalMarker,
  kLocalMarked,
  kLocalRestore,
  kTierCleanup,
  kTierGather,
  kRestoreHoldings,
  kRestoreFetch,
  // jobs and training (ckpt/workload, cli)
  kStart,
  kReport,
  kTrainReport,
  kKill,
  kCase,
  kExitSignal,
  kDpSum,
  kTpSum,
  kResumeManifest,
  kResumeCheck,
  kResumeApply,
  kResumeTime,
  kBucketLayout,
  kOptimizerLayout,
  // transports
  kNcclInit,
  // a command ran and what it checked failed (cli: exit 1)
  kCheckFailed,
  // benchmarks
  kBench,
};
inline constexpr Phase kLastPhase = Phase::kBench;

// The phase's one text form (snake_case, e.g. "nccl_init"; "" for kNone).
std::string_view PhaseName(Phase phase);
// The phase named `name` (PhaseName's inverse); nullopt for a name no phase
// has ("" is kNone).
std::optional<Phase> ParsePhase(std::string_view name);

}  // namespace ckpt
