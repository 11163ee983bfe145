// TrainWorkload::Step: gradients (exact data term, RNG noise, tp-reduce
// matmul term) and the fp32 AdamW update. Every float expression here is
// evaluated per element in one fixed order, so an element's result depends
// only on its inputs, never on which rank computes it.
#include <cmath>
#include <limits>

#include "ckpt/workload/philox.h"
#include "ckpt/workload/train_workload.h"

namespace ckpt::workload {

// acc[base + pos] = sum over this DP rank's samples of DataTarget(sample, element).
// One Philox call yields the targets of 4 consecutive sample ids.
void TrainWorkload::DataSums(const std::vector<int64_t>& samples, std::vector<uint64_t>* acc) const {
  for (size_t s = 0; s < shards_.size(); ++s) {
    const ShardInfo& si = info_[s];
    const PhiloxKey key = StreamKey(cfg_.seed, si.key_hash, Domain::kData);
    uint64_t* out = acc->data() + param_base_[si.param];
    for (const ElementRun& r : si.runs)
      for (int64_t t = 0; t < r.len; ++t) {
        const int64_t g = r.global + t;
        if (g >= si.valid_limit) continue;
        int64_t sum = 0, group = -1;
        PhiloxCounter words{};
        for (int64_t id : samples) {
          if ((id >> 2) != group) {
            group = id >> 2;
            words = Philox4x32_10(Counter(uint64_t(g), uint64_t(group)), key);
          }
          sum += DataTarget(words[size_t(id & 3)]);
        }
        out[r.local + t] = uint64_t(sum);
      }
  }
}

// tp-reduce: per row-parallel shard W [rows, k_local] and sample j, y_j = W x_j
// summed over TP by all-reduce, e_j = y_j - t_j, grad = sum_j e_j x_j^T / global_batch,
// then summed over DP. grads[s] is empty for other shards.
Status TrainWorkload::MatmulGrads(const std::vector<int64_t>& samples, Collectives& coll,
                                  std::vector<std::vector<float>>* grads) const {
  grads->assign(shards_.size(), {});
  const float inv_batch = float(1.0 / double(cfg_.global_batch));
  for (size_t s = 0; s < shards_.size(); ++s) {
    if (!info_[s].row_parallel) continue;
    const ShardedTensor& t = shards_[s].tensor;
    const int64_t kl = t.local_shape.back(), col0 = t.global_offset.back();
    const int64_t rows = t.num_elements() / std::max<int64_t>(kl, 1);
    const int64_t row0 = t.global_offset.front() * (NumElements(t.global_shape) / t.global_shape.front() /
                                                    t.global_shape.back());  // stacked: the layer's first row
    const float* w = params_[info_[s].param].main.data() + shards_[s].param_offset;
    const PhiloxKey kin = StreamKey(cfg_.seed, info_[s].key_hash, Domain::kInput);
    const PhiloxKey kout = StreamKey(cfg_.seed, info_[s].key_hash, Domain::kOutput);
    const size_t n = samples.size();
    std::vector<float> x(n * size_t(kl)), y(n * size_t(rows), 0.0f);
    for (size_t q = 0; q < n; ++q) {
      const int64_t id = samples[q];
      for (int64_t k = 0; k < kl; ++k)
        x[q * kl + k] = SignedUnit(Philox4x32_10(Counter(uint64_t(col0 + k), uint64_t(id >> 2)), kin)[size_t(id & 3)]);
      for (int64_t r = 0; r < rows; ++r) {
        float acc = 0.0f;
        for (int64_t k = 0; k < kl; ++k) acc += w[r * kl + k] * x[q * kl + k];
        y[q * rows + r] = acc;
      }
    }
    CKPT_RETURN_IF_ERROR(coll.SumOverTp(y));  // the sum whose order depends on TP
    for (size_t q = 0; q < n; ++q) {
      const int64_t id = samples[q];
      for (int64_t r = 0; r < rows; ++r)
        y[q * rows + r] -= 0.5f * SignedUnit(Philox4x32_10(Counter(uint64_t(row0 + r), uint64_t(id >> 2)), kout)[size_t(id & 3)]);
    }
    std::vector<float>& gr = (*grads)[s];
    gr.assign(size_t(rows * kl), 0.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < kl; ++k) {
        float acc = 0.0f;
        for (size_t q = 0; q < n; ++q) acc += y[q * rows + r] * x[q * kl + k];
        gr[size_t(r * kl + k)] = acc * inv_batch;
      }
    CKPT_RETURN_IF_ERROR(coll.SumOverDp(gr));
  }
  return Status::Ok();
}

void TrainWorkload::Update(const std::vector<uint64_t>& acc, const std::vector<std::vector<float>>& mm) {
  const int64_t step = step_[0] + 1;
  const double lr = lr_.Lr();
  const AdamConfig& a = cfg_.adam;
  const float b1 = float(a.beta1), b2 = float(a.beta2), eps = float(a.eps);
  const float one_b1 = float(1.0 - a.beta1), one_b2 = float(1.0 - a.beta2);
  const float step_size = float(lr / (1.0 - std::pow(a.beta1, double(step))));
  const float bc2_sqrt = float(std::sqrt(1.0 - std::pow(a.beta2, double(step))));
  const float decay = float(1.0 - lr * a.weight_decay);
  const float data_scale = float(1.0 / (2048.0 * double(cfg_.global_batch)));
  const float noise_scale = float(cfg_.noise_scale);
  const bool inject = iteration_ + 1 == cfg_.inject_nan_step;
  for (size_t s = 0; s < shards_.size(); ++s) {
    const ShardInfo& si = info_[s];
    Param& p = params_[si.param];
    const uint64_t* sums = acc.data() + param_base_[si.param];
    const PhiloxKey nkey = StreamKey(rng_.seed, si.key_hash, Domain::kNoise);
    const bool nan_here = inject && shards_[s].tensor.key == kNanTensor;
    for (const ElementRun& r : si.runs)
      for (int64_t t = 0; t < r.len; ++t) {
        const int64_t g = r.global + t;
        if (g >= si.valid_limit) continue;
        const size_t i = size_t(r.local + t);
        const float target = float(double(int64_t(sums[i])) * double(data_scale));
        const float noise = SignedUnit(Philox4x32_10(Counter(uint64_t(g), rng_.offset), nkey)[0]);
        float grad = (p.main[i] - target) + noise_scale * noise;
        if (!mm[s].empty()) grad += mm[s][size_t(r.local + t - shards_[s].param_offset)];
        if (nan_here && g == kNanIndex) grad = std::numeric_limits<float>::quiet_NaN();
        float w = si.decay ? p.main[i] * decay : p.main[i];
        const float m = b1 * p.exp_avg[i] + one_b1 * grad;
        const float v = b2 * p.exp_avg_sq[i] + one_b2 * (grad * grad);
        w -= step_size * (m / (std::sqrt(v) / bc2_sqrt + eps));
        p.main[i] = w;
        p.exp_avg[i] = m;
        p.exp_avg_sq[i] = v;
      }
  }
  for (size_t i = 0; i < params_.size(); ++i) DeriveModel(i);
}

Status TrainWorkload::Step(Collectives& coll) {
  CKPT_ASSIGN_OR_RETURN(auto micro, sampler_->NextGlobalBatch());
  std::vector<int64_t> samples;
  SampleLedger mine;
  for (const auto& mb : micro)
    for (int64_t id : mb) {
      samples.push_back(id);
      mine.Add(id);
    }
  // One exact integer all-reduce over DP carries the data sums and the ledger.
  std::vector<uint64_t> acc(size_t(local_elems_) + 2, 0);
  DataSums(samples, &acc);
  acc[size_t(local_elems_)] = mine.count;
  acc[size_t(local_elems_) + 1] = mine.digest;
  CKPT_RETURN_IF_ERROR(coll.SumOverDp(acc));
  std::vector<std::vector<float>> mm(shards_.size());
  if (cfg_.mode == TrainMode::kTpReduce) CKPT_RETURN_IF_ERROR(MatmulGrads(samples, coll, &mm));
  Update(acc, mm);
  ledger_.Merge({acc[size_t(local_elems_)], acc[size_t(local_elems_) + 1]});
  lr_.Step();
  ++rng_.offset;
  ++step_[0];
  ++iteration_;
  return Status::Ok();
}

}  // namespace ckpt::workload
