// Megatron-Core rank order and groups as mixed-radix arithmetic.
#include "reshard/parallel_state.h"

#include <array>
#include <charconv>
#include <cstdint>

namespace ckpt {
namespace {

// Upper bound on the world size so every product fits comfortably in int.
constexpr int64_t kMaxWorld = int64_t(1) << 24;

struct Field {
  std::string_view name;
  int ParallelConfig::*member;
};
// The canonical (ToString / Parse) order.
constexpr std::array<Field, 6> kFields = {{{"tp", &ParallelConfig::tp},
                                           {"pp", &ParallelConfig::pp},
                                           {"dp", &ParallelConfig::dp},
                                           {"cp", &ParallelConfig::cp},
                                           {"ep", &ParallelConfig::ep},
                                           {"vpp", &ParallelConfig::vpp}}};

// A rank grid: axis 0 varies fastest.
using Radix = std::array<int, 4>;
Radix DenseRadix(const ParallelConfig& pc) { return {pc.tp, pc.cp, pc.dp, pc.pp}; }
Radix ExpertRadix(const ParallelConfig& pc) { return {pc.tp, pc.ep, pc.expert_dp(), pc.pp}; }

Radix Digits(const Radix& sizes, int rank) {
  Radix d{};
  for (size_t i = 0; i < sizes.size(); ++i) {
    d[i] = rank % sizes[i];
    rank /= sizes[i];
  }
  return d;
}

int Compose(const Radix& sizes, const Radix& digits) {
  int rank = 0;
  for (size_t i = sizes.size(); i-- > 0;) rank = rank * sizes[i] + digits[i];
  return rank;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

Status ParseItem(std::string_view item, ParallelConfig* pc, std::array<bool, 6>* seen) {
  size_t eq = item.find('=');
  if (eq == std::string_view::npos)
    return Status::InvalidArgument("parallel config item '" + std::string(item) +
                                   "' is not key=value");
  std::string_view key = Trim(item.substr(0, eq));
  std::string_view val = Trim(item.substr(eq + 1));
  for (size_t i = 0; i < kFields.size(); ++i) {
    if (kFields[i].name != key) continue;
    if ((*seen)[i])
      return Status::InvalidArgument("parallel config key '" + std::string(key) + "' given twice");
    (*seen)[i] = true;
    int v = 0;
    auto [end, ec] = std::from_chars(val.data(), val.data() + val.size(), v);
    if (ec != std::errc() || end != val.data() + val.size() || val.empty())
      return Status::InvalidArgument("parallel config key '" + std::string(key) +
                                     "' has non-integer value '" + std::string(val) + "'");
    pc->*kFields[i].member = v;
    return Status::Ok();
  }
  return Status::InvalidArgument("unknown parallel config key '" + std::string(key) +
                                 "' (known: tp, pp, dp, cp, ep, vpp)");
}

// Which grid and which axes vary inside a group.
struct GroupShape {
  bool expert;
  std::array<bool, 4> varies;
};

GroupShape ShapeOf(Group g) {
  switch (g) {
    case Group::kTp:
      return {false, {true, false, false, false}};
    case Group::kCp:
      return {false, {false, true, false, false}};
    case Group::kDp:
      return {false, {false, false, true, false}};
    case Group::kDpCp:
      return {false, {false, true, true, false}};
    case Group::kPp:
      return {false, {false, false, false, true}};
    case Group::kEp:
      return {true, {false, true, false, false}};
    case Group::kExpertDp:
      return {true, {false, false, true, false}};
  }
  return {false, {}};
}

Status CheckRank(const ParallelConfig& pc, int rank) {
  CKPT_RETURN_IF_ERROR(pc.Validate());
  if (rank < 0 || rank >= pc.world_size())
    return Status::InvalidArgument("rank " + std::to_string(rank) + " outside world of " +
                                   std::to_string(pc.world_size()) + " (" + pc.ToString() + ")");
  return Status::Ok();
}

}  // namespace

Status ParallelConfig::Validate() const {
  for (const Field& f : kFields) {
    int v = this->*f.member;
    if (v < 1 || v > kMaxWorld)
      return Status::InvalidArgument("parallel config: " + std::string(f.name) + "=" +
                                     std::to_string(v) + " must be in [1, " +
                                     std::to_string(kMaxWorld) + "]");
  }
  if (int64_t(tp) * cp * dp * pp > kMaxWorld)
    return Status::InvalidArgument("parallel config: world size tp*cp*dp*pp exceeds " +
                                   std::to_string(kMaxWorld));
  if ((dp * cp) % ep != 0)
    return Status::InvalidArgument("parallel config: ep=" + std::to_string(ep) +
                                   " must divide dp*cp=" + std::to_string(dp * cp) +
                                   " (expert groups are carved out of the DP x CP ranks)");
  if (vpp > 1 && pp == 1)
    return Status::InvalidArgument("parallel config: vpp=" + std::to_string(vpp) +
                                   " needs pp > 1 (interleaved schedule)");
  return Status::Ok();
}

Result<ParallelConfig> ParallelConfig::Parse(std::string_view spec) {
  ParallelConfig pc;
  std::array<bool, 6> seen{};
  spec = Trim(spec);
  while (!spec.empty()) {
    size_t comma = spec.find(',');
    std::string_view item = Trim(spec.substr(0, comma));
    if (item.empty()) return Status::InvalidArgument("parallel config has an empty item");
    CKPT_RETURN_IF_ERROR(ParseItem(item, &pc, &seen));
    if (comma == std::string_view::npos) break;
    spec.remove_prefix(comma + 1);
    if (Trim(spec).empty()) return Status::InvalidArgument("parallel config ends with ','");
  }
  CKPT_RETURN_IF_ERROR(pc.Validate());
  return pc;
}

std::string ParallelConfig::ToString() const {
  std::string s;
  for (const Field& f : kFields) {
    if (!s.empty()) s += ',';
    s += std::string(f.name) + "=" + std::to_string(this->*f.member);
  }
  return s;
}

Result<RankCoords> CoordsOf(const ParallelConfig& pc, int rank) {
  CKPT_RETURN_IF_ERROR(CheckRank(pc, rank));
  Radix d = Digits(DenseRadix(pc), rank);
  Radix e = Digits(ExpertRadix(pc), rank);
  return RankCoords{d[0], d[1], d[2], d[3], e[1], e[2]};
}

Result<int> RankOf(const ParallelConfig& pc, const RankCoords& c) {
  CKPT_RETURN_IF_ERROR(pc.Validate());
  Radix sizes = DenseRadix(pc);
  Radix digits = {c.tp, c.cp, c.dp, c.pp};
  static constexpr std::array<std::string_view, 4> kNames = {"tp", "cp", "dp", "pp"};
  for (size_t i = 0; i < sizes.size(); ++i)
    if (digits[i] < 0 || digits[i] >= sizes[i])
      return Status::InvalidArgument("rank coordinate " + std::string(kNames[i]) + "=" +
                                     std::to_string(digits[i]) + " outside [0, " +
                                     std::to_string(sizes[i]) + ") for " + pc.ToString());
  int rank = Compose(sizes, digits);
  int j = DpCpRank(pc, c);
  if (c.ep != j % pc.ep || c.expert_dp != j / pc.ep)
    return Status::InvalidArgument(
        "rank coordinates ep=" + std::to_string(c.ep) +
        ", expert_dp=" + std::to_string(c.expert_dp) + " disagree with cp=" + std::to_string(c.cp) +
        ", dp=" + std::to_string(c.dp) + " (expected ep=" + std::to_string(j % pc.ep) +
        ", expert_dp=" + std::to_string(j / pc.ep) + ") for " + pc.ToString());
  return rank;
}

std::string_view GroupName(Group g) {
  switch (g) {
    case Group::kTp:
      return "tp";
    case Group::kCp:
      return "cp";
    case Group::kDp:
      return "dp";
    case Group::kDpCp:
      return "dp-cp";
    case Group::kPp:
      return "pp";
    case Group::kEp:
      return "ep";
    case Group::kExpertDp:
      return "expert-dp";
  }
  return "?";
}

Result<std::vector<int>> GroupRanks(const ParallelConfig& pc, int rank, Group g) {
  CKPT_RETURN_IF_ERROR(CheckRank(pc, rank));
  GroupShape shape = ShapeOf(g);
  Radix sizes = shape.expert ? ExpertRadix(pc) : DenseRadix(pc);
  Radix base = Digits(sizes, rank);
  int count = 1;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (shape.varies[i]) {
      base[i] = 0;
      count *= sizes[i];
    }
  // Enumerate the varying axes as a mixed-radix counter, lowest axis fastest:
  // that yields ascending ranks because strides grow with the axis.
  std::vector<int> ranks;
  ranks.reserve(count);
  Radix d = base;
  for (int n = 0; n < count; ++n) {
    ranks.push_back(Compose(sizes, d));
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (!shape.varies[i]) continue;
      if (++d[i] < sizes[i]) break;
      d[i] = 0;
    }
  }
  return ranks;
}

Result<std::vector<std::vector<int>>> AllGroups(const ParallelConfig& pc, Group g) {
  CKPT_RETURN_IF_ERROR(pc.Validate());
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < pc.world_size(); ++r) {
    CKPT_ASSIGN_OR_RETURN(std::vector<int> members, GroupRanks(pc, r, g));
    if (members.front() == r) groups.push_back(std::move(members));
  }
  return groups;
}

}  // namespace ckpt
