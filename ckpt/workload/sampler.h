// A pretraining data iterator with Megatron's semantics
// (megatron/legacy/data/data_samplers.py, MegatronPretrainingSampler), and a
// ledger proving which samples were consumed.
//
// Samples are consumed in order from consumed_samples. One micro step takes
// micro_batch * dp consecutive sample ids; DP rank r gets ids
// [r * micro_batch, (r + 1) * micro_batch) of them. A global batch is
// global_batch / (micro_batch * dp) micro steps, so the ids of global batch b
// are [consumed, consumed + global_batch) whatever dp and micro_batch are:
// the checkpointed iterator state is just consumed_samples (plus the ledger),
// and after a DP or micro-batch change the next job recomputes its slices
// from it - no sample skipped, none repeated. drop_last: a global batch that
// does not fit into total_samples is not served.
//
// SampleLedger is an order-independent digest of a multiset of sample ids
// (count + a sum of 64-bit hashes, mod 2^64), so DP ranks can merge their
// parts with an integer all-reduce and the result can be compared with the
// ledger of an exact range [0, consumed).
//
// Value types; not thread-safe. Errors: InvalidArgument naming the field,
// FailedPrecondition when the data is exhausted.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/base/status.h"

namespace ckpt::workload {

struct SampleLedger {
  uint64_t count = 0;
  uint64_t digest = 0;
  void Add(int64_t sample_id);
  void Merge(const SampleLedger& other);
  static SampleLedger Range(int64_t begin, int64_t end);  // each id of [begin, end) once
  bool operator==(const SampleLedger&) const = default;
};

struct SamplerConfig {
  int64_t total_samples = 0;
  int64_t global_batch = 0;
  int64_t micro_batch = 0;
  int dp_rank = 0;
  int dp_size = 1;
  // global_batch % (micro_batch * dp_size) == 0, all positive, 0 <= dp_rank < dp_size.
  Status Validate() const;
};

class PretrainingSampler {
 public:
  static Result<PretrainingSampler> Create(const SamplerConfig& cfg, int64_t consumed_samples);

  int64_t num_microbatches() const { return cfg_.global_batch / (cfg_.micro_batch * cfg_.dp_size); }
  int64_t consumed_samples() const { return consumed_; }
  const SamplerConfig& config() const { return cfg_; }

  // This DP rank's micro batches of the next global batch (sample ids), and
  // advances consumed_samples by global_batch. FailedPrecondition when fewer
  // than global_batch samples are left.
  Result<std::vector<std::vector<int64_t>>> NextGlobalBatch();

 private:
  PretrainingSampler(const SamplerConfig& cfg, int64_t consumed) : cfg_(cfg), consumed_(consumed) {}
  SamplerConfig cfg_;
  int64_t consumed_;
};

// The checkpointed iterator state: layout-invariant (no dp, no micro batch).
struct DataIteratorState {
  int64_t consumed_samples = 0;
  int64_t global_batch = 0;
  int64_t total_samples = 0;
  SampleLedger ledger;  // every sample id consumed so far, over all DP ranks

  nlohmann::json ToJson() const;
  static Result<DataIteratorState> FromJson(const nlohmann::json& j);
};

}  // namespace ckpt::workload
