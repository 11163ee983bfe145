#include "ckpt/workload/sampler.h"

#include <string>

#include "ckpt/workload/philox.h"

namespace ckpt::workload {

void SampleLedger::Add(int64_t sample_id) {
  ++count;
  digest += Mix64(uint64_t(sample_id) ^ 0x5A4D504C45ull);  // "SAMPLE": not the raw id, so sums do not alias
}

void SampleLedger::Merge(const SampleLedger& other) {
  count += other.count;
  digest += other.digest;
}

SampleLedger SampleLedger::Range(int64_t begin, int64_t end) {
  SampleLedger l;
  for (int64_t i = begin; i < end; ++i) l.Add(i);
  return l;
}

Status SamplerConfig::Validate() const {
  auto bad = [](const std::string& why) { return Status::InvalidArgument("data sampler: " + why); };
  if (total_samples <= 0 || global_batch <= 0 || micro_batch <= 0 || dp_size <= 0)
    return bad("total_samples, global_batch, micro_batch and dp must be positive");
  if (dp_rank < 0 || dp_rank >= dp_size)
    return bad("dp rank " + std::to_string(dp_rank) + " outside [0, " + std::to_string(dp_size) + ")");
  if (global_batch % (micro_batch * dp_size) != 0)
    return bad("global batch " + std::to_string(global_batch) + " is not divisible by micro batch " +
               std::to_string(micro_batch) + " x dp " + std::to_string(dp_size));
  return Status::Ok();
}

Result<PretrainingSampler> PretrainingSampler::Create(const SamplerConfig& cfg, int64_t consumed_samples) {
  CKPT_RETURN_IF_ERROR(cfg.Validate());
  if (consumed_samples < 0 || consumed_samples > cfg.total_samples)
    return Status::InvalidArgument("data sampler: consumed_samples " + std::to_string(consumed_samples) +
                                   " outside [0, total_samples " + std::to_string(cfg.total_samples) + "]");
  return PretrainingSampler(cfg, consumed_samples);
}

Result<std::vector<std::vector<int64_t>>> PretrainingSampler::NextGlobalBatch() {
  if (consumed_ + cfg_.global_batch > cfg_.total_samples)
    return Status::FailedPrecondition("data exhausted: " + std::to_string(consumed_) + " of " +
                                      std::to_string(cfg_.total_samples) +
                                      " samples consumed, a global batch needs " +
                                      std::to_string(cfg_.global_batch));
  const int64_t step = cfg_.micro_batch * cfg_.dp_size;  // samples per micro step over all DP ranks
  std::vector<std::vector<int64_t>> micro(static_cast<size_t>(num_microbatches()));
  for (int64_t m = 0; m < num_microbatches(); ++m) {
    const int64_t first = consumed_ + m * step + int64_t(cfg_.dp_rank) * cfg_.micro_batch;
    for (int64_t i = 0; i < cfg_.micro_batch; ++i) micro[size_t(m)].push_back(first + i);
  }
  consumed_ += cfg_.global_batch;
  return micro;
}

nlohmann::json DataIteratorState::ToJson() const {
  return {{"consumed_samples", consumed_samples},
          {"global_batch", global_batch},
          {"total_samples", total_samples},
          {"ledger", {{"count", ledger.count}, {"digest", ledger.digest}}}};
}

Result<DataIteratorState> DataIteratorState::FromJson(const nlohmann::json& j) {
  DataIteratorState s;
  try {
    s.consumed_samples = j.at("consumed_samples").get<int64_t>();
    s.global_batch = j.at("global_batch").get<int64_t>();
    s.total_samples = j.at("total_samples").get<int64_t>();
    s.ledger.count = j.at("ledger").at("count").get<uint64_t>();
    s.ledger.digest = j.at("ledger").at("digest").get<uint64_t>();
  } catch (const std::exception& e) {
    return Status::Corruption(std::string("data iterator state: ") + e.what());
  }
  return s;
}

}  // namespace ckpt::workload
