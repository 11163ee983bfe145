// GptLocalState: owned local parameter buffers of the synthetic GPT workload.
#include "ckpt/workload/gpt_local_state.h"

#include <string>

#include "ckpt/workload/expected_values.h"

namespace ckpt::workload {
namespace {
std::string Str(int64_t v) { return std::to_string(v); }

// The (empty) `_extra_state` objects the shards carry (MCore local linears).
void AddExtraStates(const std::vector<GptShard>& shards, ShardedStateDict* sd) {
  for (const GptShard& g : shards)
    if (g.extra_state) sd->AddObject(*g.extra_state);
}
}  // namespace

Result<GptLocalState> GptLocalState::Create(std::vector<GptShard> shards) {
  GptLocalState s(std::move(shards));
  std::map<std::string, const GptShard*> first_of;
  for (const GptShard& g : s.shards_) {
    CKPT_RETURN_IF_ERROR(g.tensor.Validate());
    auto [it, fresh] = first_of.emplace(g.param, &g);
    const GptShard& f = *it->second;
    if (!fresh && (f.param_shape != g.param_shape || f.tensor.dtype != g.tensor.dtype))
      return Status::InvalidArgument("parameter '" + g.param +
                                     "': shards disagree on shape or dtype");
    if (g.param_offset < 0 || g.param_offset + g.tensor.num_elements() > NumElements(g.param_shape))
      return Status::InvalidArgument("parameter '" + g.param + "': shard " +
                                     g.tensor.DebugString() + " at element " + Str(g.param_offset) +
                                     " overruns " + ShapeToString(g.param_shape));
    if (fresh)
      s.params_[g.param].assign(size_t(NumElements(g.param_shape)) * DTypeSize(g.tensor.dtype),
                                std::byte{0});
  }
  return s;
}

std::span<const std::byte> GptLocalState::ShardView(size_t i) const {
  const GptShard& g = shards_.at(i);
  const std::vector<std::byte>& buf = params_.at(g.param);
  return std::span<const std::byte>(buf).subspan(size_t(g.param_offset) * DTypeSize(g.tensor.dtype),
                                                 size_t(g.tensor.num_bytes()));
}

std::span<std::byte> GptLocalState::ShardData(size_t i) {
  std::span<const std::byte> v = ShardView(i);
  // The buffer is ours and non-const here; the view only fixed the bounds.
  return {const_cast<std::byte*>(v.data()), v.size()};
}

std::span<std::byte> GptLocalState::Param(const std::string& name) {
  auto it = params_.find(name);
  return it == params_.end() ? std::span<std::byte>() : std::span<std::byte>(it->second);
}

ShardedStateDict GptLocalState::StateDict() {
  ShardedStateDict sd;
  for (size_t i = 0; i < shards_.size(); ++i) sd.AddTensor(shards_[i].tensor, ShardData(i));
  AddExtraStates(shards_, &sd);
  return sd;
}

Result<ShardedStateDict> GptLocalState::StateDictFor(const std::vector<GptShard>& other) {
  ShardedStateDict sd;
  for (const GptShard& g : other) {
    auto it = params_.find(g.param);
    const size_t es = DTypeSize(g.tensor.dtype);
    if (it == params_.end() || it->second.size() != size_t(NumElements(g.param_shape)) * es ||
        size_t(g.param_offset + g.tensor.num_elements()) * es > it->second.size())
      return Status::InvalidArgument("parameter '" + g.param + "' of " + g.tensor.key +
                                     " does not match this rank's local parameters");
    sd.AddTensor(g.tensor, std::span<std::byte>(it->second).subspan(size_t(g.param_offset) * es,
                                                                     size_t(g.tensor.num_bytes())));
  }
  AddExtraStates(other, &sd);
  return sd;
}

int64_t GptLocalState::TotalBytes() const {
  int64_t n = 0;
  for (const auto& [name, buf] : params_) n += int64_t(buf.size());
  return n;
}

Status GptLocalState::FillExpected(int64_t vocab_size) {
  for (size_t i = 0; i < shards_.size(); ++i)
    CKPT_RETURN_IF_ERROR(workload::FillExpected(shards_[i].tensor, ShardData(i), vocab_size));
  return Status::Ok();
}

Result<int64_t> GptLocalState::CountMismatches(int64_t vocab_size, std::string* first_bad) const {
  int64_t total = 0;
  for (size_t i = 0; i < shards_.size(); ++i) {
    int64_t first = -1;
    CKPT_ASSIGN_OR_RETURN(
        int64_t bad, workload::CountMismatches(shards_[i].tensor, ShardView(i), &first, vocab_size));
    if (bad > 0 && total == 0 && first_bad)
      *first_bad = shards_[i].tensor.key + " element " + Str(first);
    total += bad;
  }
  return total;
}

}  // namespace ckpt::workload
