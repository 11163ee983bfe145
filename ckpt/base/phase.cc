// PhaseName / ParsePhase: see phase.h.
#include "ckpt/base/phase.h"

#include <array>
#include <utility>

namespace ckpt {
namespace {

using Row = std::pair<Phase, std::string_view>;
// One row per phase, in enum order (checked below): the only place a phase's
// text is spelled.
constexpr std::array kNames = {
    Row{Phase::kNone, ""},
    Row{Phase::kValidate, "validate"},
    Row{Phase::kBegin, "begin"},
    Row{Phase::kPlan, "plan"},
    Row{Phase::kWrite, "write"},
    Row{Phase::kVote, "vote"},
    Row{Phase::kCommit, "commit"},
    Row{Phase::kNonFiniteGuard, "nonfinite_guard"},
    Row{Phase::kMemcpyBaseline, "memcpy_baseline"},
    Row{Phase::kLoad, "load"},
    Row{Phase::kLoadShare, "load_share"},
    Row{Phase::kStrict, "strict"},
    Row{Phase::kLocalWrite, "local_write"},
    Row{Phase::kLocalReplicate, "local_replicate"},
    Row{Phase::kLocalReceive, "local_receive"},
    Row{Phase::kLocalCommit, "local_commit"},
    Row{Phase::kLocalMarker, "local_marker"},
    Row{Phase::kLocalMarked, "local_marked"},
    Row{Phase::kLocalRestore, "local_restore"},
    Row{Phase::kTierCleanup, "tier_cleanup"},
    Row{Phase::kTierGather, "tier_gather"},
    Row{Phase::kRestoreHoldings, "restore_holdings"},
    Row{Phase::kRestoreFetch, "restore_fetch"},
    Row{Phase::kStart, "start"},
    Row{Phase::kReport, "report"},
    Row{Phase::kTrainReport, "train_report"},
    Row{Phase::kKill, "kill"},
    Row{Phase::kCase, "case"},
    Row{Phase::kExitSignal, "exit_signal"},
    Row{Phase::kDpSum, "dp_sum"},
    Row{Phase::kTpSum, "tp_sum"},
    Row{Phase::kResumeManifest, "resume_manifest"},
    Row{Phase::kResumeCheck, "resume_check"},
    Row{Phase::kResumeApply, "resume_apply"},
    Row{Phase::kResumeTime, "resume_time"},
    Row{Phase::kBucketLayout, "bucket_layout"},
    Row{Phase::kOptimizerLayout, "optimizer_layout"},
    Row{Phase::kNcclInit, "nccl_init"},
    Row{Phase::kCheckFailed, "check_failed"},
    Row{Phase::kBench, "bench"},
};

constexpr bool InEnumOrder() {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (size_t(kNames[i].first) != i) return false;
  return kNames.size() == size_t(kLastPhase) + 1;
}
static_assert(InEnumOrder(), "kNames: one row per Phase, in enum order");

}  // namespace

std::string_view PhaseName(Phase phase) {
  const size_t i = size_t(phase);
  return i < kNames.size() ? kNames[i].second : std::string_view("unknown");
}

std::optional<Phase> ParsePhase(std::string_view name) {
  for (const Row& row : kNames)
    if (row.second == name) return row.first;
  return std::nullopt;
}

}  // namespace ckpt
