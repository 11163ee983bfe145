#include "ckpt/workload/collectives.h"

#include <climits>
#include <cstring>
#include <string>

namespace ckpt::workload {
namespace {

template <typename T>
MPI_Datatype MpiType();
template <>
MPI_Datatype MpiType<uint64_t>() { return MPI_UINT64_T; }
template <>
MPI_Datatype MpiType<float>() { return MPI_FLOAT; }

// MPI counts are int: reduce in pieces of at most INT_MAX / 2 elements.
template <typename T>
Status MpiSum(MPI_Comm comm, std::span<T> data, const char* what) {
  constexpr size_t kPiece = size_t(INT_MAX / 2);
  for (size_t at = 0; at < data.size(); at += kPiece) {
    const int n = int(std::min(kPiece, data.size() - at));
    CKPT_RETURN_IF_ERROR(MpiStatus(MPI_Allreduce(MPI_IN_PLACE, data.data() + at, n, MpiType<T>(), MPI_SUM, comm), what));
  }
  return Status::Ok();
}

// All-gather through the Comm control plane, then sum in group-rank order.
template <typename T>
Status CommSum(Comm* comm, std::span<T> data, Millis timeout, Phase phase) {
  if (!comm || comm->size() == 1) return Status::Ok();
  std::string mine(reinterpret_cast<const char*>(data.data()), data.size_bytes());
  CKPT_ASSIGN_OR_RETURN(auto all, comm->AllGather(mine, timeout, phase));
  std::vector<T> sum(data.size(), T(0)), part(data.size());
  for (const std::string& s : all) {
    if (s.size() != data.size_bytes())
      return Status::Internal(std::string(PhaseName(phase)) + ": ranks reduce buffers of different sizes");
    std::memcpy(part.data(), s.data(), s.size());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += part[i];
  }
  std::memcpy(data.data(), sum.data(), data.size_bytes());
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<MpiCollectives>> MpiCollectives::Create(MpiComm& world, const ParallelConfig& layout) {
  if (layout.world_size() != world.size())
    return Status::InvalidArgument("layout " + layout.ToString() + " does not match a world of " +
                                   std::to_string(world.size()));
  CKPT_ASSIGN_OR_RETURN(auto tp_ranks, GroupRanks(layout, world.rank(), Group::kTp));
  CKPT_ASSIGN_OR_RETURN(auto dp_ranks, GroupRanks(layout, world.rank(), Group::kDp));
  CKPT_ASSIGN_OR_RETURN(auto tp, world.Split(tp_ranks.front(), world.rank()));
  CKPT_ASSIGN_OR_RETURN(auto dp, world.Split(dp_ranks.front(), world.rank()));
  return std::unique_ptr<MpiCollectives>(new MpiCollectives(std::move(tp), std::move(dp)));
}

Status MpiCollectives::SumOverDp(std::span<uint64_t> data) {
  return dp_size() == 1 ? Status::Ok() : MpiSum(dp_->raw(), data, "MPI_Allreduce over DP (uint64)");
}
Status MpiCollectives::SumOverDp(std::span<float> data) {
  return dp_size() == 1 ? Status::Ok() : MpiSum(dp_->raw(), data, "MPI_Allreduce over DP (float)");
}
Status MpiCollectives::SumOverTp(std::span<float> data) {
  return tp_size() == 1 ? Status::Ok() : MpiSum(tp_->raw(), data, "MPI_Allreduce over TP (float)");
}

Status CommCollectives::SumOverDp(std::span<uint64_t> data) { return CommSum(dp_, data, timeout_, Phase::kDpSum); }
Status CommCollectives::SumOverDp(std::span<float> data) { return CommSum(dp_, data, timeout_, Phase::kDpSum); }
Status CommCollectives::SumOverTp(std::span<float> data) { return CommSum(tp_, data, timeout_, Phase::kTpSum); }

}  // namespace ckpt::workload
