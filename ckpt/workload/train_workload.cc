// TrainWorkload: buffers, initial state and the checkpointed state dict.
// The step is in train_step.cc, resume in train_resume.cc.
#include "ckpt/workload/train_workload.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>

#include "ckpt/workload/philox.h"
#include "ckpt/workload/train_keys.h"

namespace ckpt::workload {
namespace {

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Row-parallel weights: the TP split is on the last axis, every leading axis is whole (or the stacked layer axis).
bool IsRowParallel(const ShardedTensor& t) {
  if (!EndsWith(t.key, ".self_attention.linear_proj.weight") && !EndsWith(t.key, ".mlp.linear_fc2.weight")) return false;
  if (t.global_shape.size() < 2 || t.flat_range) return false;
  for (size_t d = 0; d + 1 < t.global_shape.size(); ++d)
    if (t.local_shape[d] != t.global_shape[d] && t.local_shape[d] != 1) return false;
  return true;
}

void ToModel(DType dt, float v, std::byte* out) {
  switch (dt) {
    case DType::kBFloat16: {
      const uint16_t h = FloatToBf16(v);
      std::memcpy(out, &h, 2);
      return;
    }
    case DType::kFloat16: {
      const uint16_t h = FloatToFp16(v);
      std::memcpy(out, &h, 2);
      return;
    }
    case DType::kFloat64: {
      const double d = v;
      std::memcpy(out, &d, 8);
      return;
    }
    default:
      std::memcpy(out, &v, 4);
  }
}

}  // namespace

std::vector<ElementRun> ElementRuns(const ShardedTensor& t, int64_t param_offset) {
  const size_t n = t.global_shape.size();
  if (n == 0) return {{param_offset, 0, 1}};
  std::vector<int64_t> stride(n, 1);
  for (int d = int(n) - 2; d >= 0; --d) stride[d] = stride[d + 1] * t.global_shape[d + 1];
  const int64_t len = t.local_shape.back();
  const int64_t rows = NumElements(t.local_shape) / std::max<int64_t>(len, 1);
  std::vector<ElementRun> runs;
  if (len == 0 || rows == 0) return runs;
  std::vector<int64_t> idx(n - 1, 0);  // odometer over the leading local axes
  for (int64_t r = 0; r < rows; ++r) {
    int64_t global = t.global_offset.back();
    for (size_t d = 0; d + 1 < n; ++d) global += (t.global_offset[d] + idx[d]) * stride[d];
    const int64_t local = param_offset + r * len;
    if (!runs.empty() && runs.back().local + runs.back().len == local && runs.back().global + runs.back().len == global)
      runs.back().len += len;
    else
      runs.push_back({local, global, len});
    for (int d = int(n) - 2; d >= 0 && ++idx[d] == t.local_shape[d]; --d) idx[d] = 0;
  }
  return runs;
}

Result<std::unique_ptr<TrainWorkload>> TrainWorkload::Create(const TrainConfig& cfg, const reshard::GptConfig& model,
                                                             const ParallelConfig& layout, const RankCoords& coords) {
  CKPT_RETURN_IF_ERROR(cfg.Validate());
  if (!IsFloating(model.dtype)) return Status::InvalidArgument("train: the model dtype must be a float type");
  CKPT_ASSIGN_OR_RETURN(auto shards, reshard::GptShards(model, layout, coords));
  std::unique_ptr<TrainWorkload> w(new TrainWorkload(cfg, model, layout, coords));
  CKPT_ASSIGN_OR_RETURN(w->rank_, RankOf(layout, coords));
  CKPT_RETURN_IF_ERROR(w->Build(std::move(shards)));
  SamplerConfig sc{cfg.total_samples, cfg.global_batch, cfg.micro_batch, coords.dp, layout.dp};
  CKPT_ASSIGN_OR_RETURN(auto sampler, PretrainingSampler::Create(sc, 0));
  w->sampler_.emplace(std::move(sampler));
  return w;
}

Status TrainWorkload::Build(std::vector<reshard::GptShard> shards) {
  shards_ = std::move(shards);
  std::map<std::string, size_t> index;
  for (const reshard::GptShard& g : shards_) {
    auto [it, fresh] = index.emplace(g.param, params_.size());
    if (fresh) {
      Param p;
      p.numel = NumElements(g.param_shape);
      p.main.assign(size_t(p.numel), 0.0f);
      p.exp_avg = p.exp_avg_sq = p.main;
      p.model.assign(size_t(p.numel) * DTypeSize(model_.dtype), std::byte{0});
      param_base_.push_back(local_elems_);
      local_elems_ += p.numel;
      params_.push_back(std::move(p));
    }
    if (g.tensor.flat_range || g.param_offset + g.tensor.num_elements() > params_[it->second].numel)
      return Status::InvalidArgument("train: shard " + g.tensor.DebugString() + " does not fit parameter " + g.param);
    ShardInfo si;
    si.param = it->second;
    si.key_hash = HashKey(g.tensor.key);
    si.valid_limit = std::numeric_limits<int64_t>::max();
    if (g.tensor.allow_shape_mismatch && !g.tensor.global_shape.empty())
      si.valid_limit = model_.vocab_size * (NumElements(g.tensor.global_shape) / g.tensor.global_shape[0]);
    si.decay = !EndsWith(g.tensor.key, "layernorm.weight") && !EndsWith(g.tensor.key, ".bias");
    si.row_parallel = IsRowParallel(g.tensor);
    si.runs = ElementRuns(g.tensor, g.param_offset);
    info_.push_back(std::move(si));
  }
  return Status::Ok();
}

void TrainWorkload::Initialize() {
  for (size_t s = 0; s < shards_.size(); ++s) {
    const ShardInfo& si = info_[s];
    Param& p = params_[si.param];
    const bool norm = EndsWith(shards_[s].tensor.key, "layernorm.weight");
    const PhiloxKey key = StreamKey(cfg_.seed, si.key_hash, Domain::kInit);
    for (const ElementRun& r : si.runs)
      for (int64_t t = 0; t < r.len; ++t) {
        const int64_t g = r.global + t;
        float v = 0.0f;  // vocab padding rows stay zero
        if (g < si.valid_limit) v = norm ? 1.0f : 0.02f * SignedUnit(Philox4x32_10(Counter(uint64_t(g), 0), key)[0]);
        p.main[size_t(r.local + t)] = v;
      }
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    std::fill(params_[i].exp_avg.begin(), params_[i].exp_avg.end(), 0.0f);
    std::fill(params_[i].exp_avg_sq.begin(), params_[i].exp_avg_sq.end(), 0.0f);
    DeriveModel(i);
  }
  rng_ = {cfg_.seed, 0};
  ledger_ = {};
  lr_ = LrScheduler(cfg_.lr);
  iteration_ = 0;
  step_[0] = 0;
}

void TrainWorkload::DeriveModel(size_t param) {
  Param& p = params_[param];
  const size_t es = DTypeSize(model_.dtype);
  for (int64_t i = 0; i < p.numel; ++i) ToModel(model_.dtype, p.main[size_t(i)], p.model.data() + size_t(i) * es);
}

bool TrainWorkload::ModelMatchesMain(size_t param, int64_t* bad) const {
  const Param& p = params_[param];
  const size_t es = DTypeSize(model_.dtype);
  // Rounded a block at a time and compared with one memcmp per block (a
  // resume checks every element: one call per element was ~50 ms per 90 MB rank).
  constexpr int64_t kBlock = 4096;
  std::byte want[kBlock * 8];
  for (int64_t b = 0; b < p.numel; b += kBlock) {
    const int64_t n = std::min(kBlock, p.numel - b);
    for (int64_t i = 0; i < n; ++i) ToModel(model_.dtype, p.main[size_t(b + i)], want + size_t(i) * es);
    const std::byte* have = p.model.data() + size_t(b) * es;
    if (std::memcmp(want, have, size_t(n) * es) == 0) continue;
    for (int64_t i = 0; i < n; ++i)
      if (std::memcmp(want + size_t(i) * es, have + size_t(i) * es, es) != 0) {
        *bad = b + i;
        return false;
      }
  }
  return true;
}

std::span<const float> TrainWorkload::MainParams(size_t shard) const {
  const reshard::GptShard& g = shards_.at(shard);
  return std::span<const float>(params_[info_[shard].param].main)
      .subspan(size_t(g.param_offset), size_t(g.tensor.num_elements()));
}

std::span<const std::byte> TrainWorkload::ModelParams(size_t shard) const {
  const reshard::GptShard& g = shards_.at(shard);
  const size_t es = DTypeSize(model_.dtype);
  return std::span<const std::byte>(params_[info_[shard].param].model)
      .subspan(size_t(g.param_offset) * es, size_t(g.tensor.num_elements()) * es);
}

ShardedStateDict TrainWorkload::SaveDict(const ResumeParts& parts) {
  ShardedStateDict sd;
  const size_t es = DTypeSize(model_.dtype);
  for (size_t s = 0; s < shards_.size(); ++s) {
    const reshard::GptShard& g = shards_[s];
    Param& p = params_[info_[s].param];
    sd.AddTensor(g.tensor, std::span<std::byte>(p.model).subspan(size_t(g.param_offset) * es, size_t(g.tensor.num_bytes())));
  }
  for (int k = 0; k < 3; ++k)
    for (size_t s = 0; s < shards_.size(); ++s) {
      const reshard::GptShard& g = shards_[s];
      Param& p = params_[info_[s].param];
      std::vector<float>& buf = k == 0 ? p.main : k == 1 ? p.exp_avg : p.exp_avg_sq;
      ShardedTensor t = g.tensor;
      t.key = OptimizerKey(kOptimizerStates[k], g.tensor.key);
      t.dtype = DType::kFloat32;
      sd.AddTensor(std::move(t), std::as_writable_bytes(std::span<float>(buf).subspan(
                                     size_t(g.param_offset), size_t(g.tensor.num_elements()))));
    }
  ShardedTensor step;
  step.key = kStepTensor;
  step.dtype = DType::kInt64;
  step.global_shape = step.global_offset = step.local_shape = {1};
  step.global_offset = {0};
  step.replica_id = {coords_.pp, coords_.tp, DpCpRank(layout_, coords_)};  // main on rank 0 only
  sd.AddTensor(std::move(step), std::as_writable_bytes(std::span<int64_t>(step_)));
  for (const reshard::GptShard& g : shards_)  // MCore's _extra_state of the linears (GptConfig::extra_state)
    if (g.extra_state) sd.AddObject(*g.extra_state);

  DataIteratorState it{sampler_->consumed_samples(), cfg_.global_batch, cfg_.total_samples, ledger_};
  std::vector<std::pair<const char*, nlohmann::json>> objects = {
      {kArgs, cfg_.ArgsJson()},
      {kProgress, {{"iteration", iteration_}}},
      {kLr, lr_.StateJson()}};
  if (parts.data_iterator) objects.push_back({kIterator, it.ToJson()});
  if (parts.rng) objects.push_back({kRng, {{"generator", "philox4x32-10"}, {"seed", rng_.seed}, {"offset", rng_.offset}}});
  for (const auto& [key, j] : objects) {
    const std::string text = j.dump();
    const auto* b = reinterpret_cast<const std::byte*>(text.data());
    sd.AddObject({key, {1}, {0}, {rank_ == 0 ? 0 : 1}}, std::vector<std::byte>(b, b + text.size()));
  }
  return sd;
}

}  // namespace ckpt::workload
