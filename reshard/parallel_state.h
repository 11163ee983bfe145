// Parallel layout of a Megatron-style job: sizes, a rank's coordinates, groups.
//
// Rank order follows Megatron-Core's default "tp-cp-ep-dp-pp" (tp fastest):
//   dense layers:  rank = tp + TP*(cp + CP*(dp + DP*pp))
//   expert layers: rank = tp + TP*(ep + EP*(edp + EDP*pp)), EDP = DP*CP/EP
// (MCore builds two RankGenerators; the dense one has ep=1, the expert one has
// cp=1 and expert-TP == TP here.) Expert groups therefore carve EP out of the
// DP*CP ranks of one pipeline stage: with j = cp + CP*dp, ep = j % EP and
// edp = j / EP.
//
// Failure: Validate/Parse/CoordsOf/RankOf return InvalidArgument naming the
// offending field. Everything here is a pure function of its arguments:
// thread-safe, no global state.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "ckpt/base/status.h"

namespace ckpt {

struct ParallelConfig {
  int tp = 1;   // tensor parallel
  int pp = 1;   // pipeline parallel
  int dp = 1;   // data parallel (without CP)
  int cp = 1;   // context parallel
  int ep = 1;   // expert parallel (carved out of dp*cp)
  int vpp = 1;  // virtual pipeline chunks per stage (1 = not interleaved)

  int world_size() const { return tp * cp * dp * pp; }
  int expert_dp() const { return dp * cp / ep; }

  // All sizes >= 1, ep divides dp*cp, vpp > 1 only with pp > 1 (as MCore).
  Status Validate() const;
  // "tp=4,pp=2,dp=1,cp=1,ep=1,vpp=1"; omitted keys are 1; the result is validated.
  static Result<ParallelConfig> Parse(std::string_view spec);
  // Canonical form accepted by Parse: "tp=4,pp=2,dp=1,cp=1,ep=1,vpp=1".
  std::string ToString() const;
  bool operator==(const ParallelConfig&) const = default;
};

struct RankCoords {
  int tp = 0;
  int cp = 0;
  int dp = 0;
  int pp = 0;
  int ep = 0;
  int expert_dp = 0;
  bool operator==(const RankCoords&) const = default;
};

// The rank's index in its data-parallel-with-context-parallel group
// (cp + CP*dp): the third slot of MCore's replica_id.
inline int DpCpRank(const ParallelConfig& pc, const RankCoords& c) { return c.cp + pc.cp * c.dp; }

Result<RankCoords> CoordsOf(const ParallelConfig& pc, int rank);
// Inverse of CoordsOf. tp/cp/dp/pp define the rank; ep and expert_dp must agree with them.
Result<int> RankOf(const ParallelConfig& pc, const RankCoords& c);

enum class Group {
  kTp,        // same cp, dp, pp
  kCp,        // same tp, dp, pp
  kDp,        // same tp, cp, pp
  kDpCp,      // same tp, pp (MCore's data_parallel_group(with_context_parallel=True))
  kPp,        // same tp, cp, dp
  kEp,        // expert layers: same tp, expert_dp, pp
  kExpertDp,  // expert layers: same tp, ep, pp
};
std::string_view GroupName(Group g);

// Ranks of `rank`'s group, ascending; index in the list = rank's index in the
// group. The first entry is a valid Split color that is the same for all members.
Result<std::vector<int>> GroupRanks(const ParallelConfig& pc, int rank, Group g);
// Every group of that kind, each ascending, ordered by their first rank.
Result<std::vector<std::vector<int>>> AllGroups(const ParallelConfig& pc, Group g);

inline Result<std::vector<int>> TpGroup(const ParallelConfig& pc, int rank) {
  return GroupRanks(pc, rank, Group::kTp);
}
inline Result<std::vector<int>> DpGroup(const ParallelConfig& pc, int rank) {
  return GroupRanks(pc, rank, Group::kDp);
}
inline Result<std::vector<int>> PpGroup(const ParallelConfig& pc, int rank) {
  return GroupRanks(pc, rank, Group::kPp);
}
inline Result<std::vector<int>> EpGroup(const ParallelConfig& pc, int rank) {
  return GroupRanks(pc, rank, Group::kEp);
}

}  // namespace ckpt
