// One rank of the deterministic GPT training workload: its parameters in a
// Megatron-Core layout (reshard/megatron_gpt.h), fp32 main params with Adam
// moments, a Megatron-like data iterator, LR schedule, RNG state, and the
// checkpointed resume state.
//
// Precision: fp32 main params (the optimizer's copy) with the model params
// (GptConfig::dtype, bf16 in the presets) derived from them after each step by
// round-to-nearest-even, as in Megatron's bf16 training with an fp32 optimizer.
// Both are saved: the model params are what a consumer loads, the fp32 copy is
// what resume needs to be bitwise, and ulp differences show first there.
//
// Checkpoint contents (keys):
//   <model key>                                model params, GptShards boxes
//   optimizer.state.{fp32_param,exp_avg,exp_avg_sq}.<model key>
//                                              fp32, the same boxes and replicas
//   optimizer.step                             int64 [1], main on rank 0
//   resume.args, resume.progress, resume.data_iterator, resume.rng,
//   resume.lr_scheduler                        JSON objects, one cell, main on rank 0
// Every resume object is layout-invariant (the counter-based RNG is keyed by
// global element index, so no per-rank generator state exists), so the same
// training state fingerprints identically under any layout.
//
// Resume is strict: every required tensor and object must be in the
// checkpoint (all missing items listed, agreed over ranks), the arguments must
// match (CheckArgs), progress/step/iterator must agree with the manifest's
// iteration, and the model params must be the rounding of the fp32 params.
// ResumeParts turns off saving and loading of the RNG or iterator state: the
// negative controls (a job resumed without them restarts its RNG stream or its
// data order, and is not bitwise).
//
// Cost: per local element 12 bytes of fp32 optimizer state, the model param,
// and during a step an 8-byte integer accumulator (exact data sums over the
// DP all-reduce) - sized for the test presets, not for billion-parameter runs.
// Failure: Step fails only if the sampler is exhausted or a reduction fails;
// the state is then mid-step and the job should stop (as after a failed
// all-reduce in Megatron).
//
// Ownership: the object owns all buffers; state dicts it returns point into it
// and stay valid while it lives. Not thread-safe; Step and Resume are
// collective over the job (Collectives / Comm): all ranks call them together.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/protocol/checkpoint.h"
#include "reshard/parallel_state.h"
#include "ckpt/workload/collectives.h"
#include "ckpt/workload/lr_schedule.h"
#include "ckpt/workload/sampler.h"
#include "ckpt/workload/train_config.h"
#include "reshard/megatron_gpt.h"

namespace ckpt::workload {

struct ResumeParts {
  bool rng = true;
  bool data_iterator = true;
};

struct RngState {
  uint64_t seed = 0;
  uint64_t offset = 0;  // Philox counter offset, advanced once per step (like torch's philox offset)
  bool operator==(const RngState&) const = default;
};

// Contiguous local elements (from `local` in the parameter) whose global
// row-major indices are contiguous too (from `global`).
struct ElementRun {
  int64_t local = 0, global = 0, len = 0;
  bool operator==(const ElementRun&) const = default;
};
// Runs along the last axis of `t`'s box, merged where both positions continue
// (one run for an axis-0 split). `t` has no flat range.
std::vector<ElementRun> ElementRuns(const ShardedTensor& t, int64_t param_offset);

class TrainWorkload {
 public:
  static Result<std::unique_ptr<TrainWorkload>> Create(const TrainConfig& cfg, const reshard::GptConfig& model,
                                                       const ParallelConfig& layout, const RankCoords& coords);

  // Iteration 0: initial weights (a function of seed, key, global index), zero moments.
  void Initialize();
  // One training iteration (collective over the TP and DP groups).
  Status Step(Collectives& coll);

  // Everything to checkpoint, pointing into this object (objects serialised now).
  ShardedStateDict SaveDict(const ResumeParts& parts);
  // Loads the latest (or `iteration`) checkpoint under `root` into this
  // object and checks it (see the header comment). `comm` spans the job.
  Status Resume(const std::string& root, int64_t iteration, Comm* comm, const ResumeParts& parts, Millis timeout,
                LoadStats* stats);
  // The checks and state of Resume for a dict some other path already filled
  // (the local tier, ckpt/protocol/local_tier.h): `loaded` is SaveDict(parts)
  // with its buffers and objects loaded for `iteration`. Collective.
  Status ApplyLoaded(const ShardedStateDict& loaded, int64_t iteration, Comm* comm, const ResumeParts& parts,
                     Millis timeout);

  int64_t iteration() const { return iteration_; }
  int64_t consumed_samples() const { return sampler_->consumed_samples(); }
  const SampleLedger& ledger() const { return ledger_; }
  const RngState& rng() const { return rng_; }
  const LrScheduler& lr() const { return lr_; }
  const TrainConfig& config() const { return cfg_; }

  // Read access for tests: the rank's shards and their fp32 / model data.
  const std::vector<reshard::GptShard>& shards() const { return shards_; }
  std::span<const float> MainParams(size_t shard) const;
  std::span<const std::byte> ModelParams(size_t shard) const;

 private:
  struct Param {  // one rank-local parameter tensor
    int64_t numel = 0;
    std::vector<float> main, exp_avg, exp_avg_sq;
    std::vector<std::byte> model;
  };
  struct ShardInfo {
    size_t param = 0;
    uint64_t key_hash = 0;
    int64_t valid_limit = 0;  // global flat indices >= this are vocab padding (kept zero)
    bool decay = true;        // weight decay applies (not norms / biases)
    bool row_parallel = false;  // tp-reduce matmul applies (last axis split over TP)
    std::vector<ElementRun> runs;
  };

  TrainWorkload(TrainConfig cfg, reshard::GptConfig model, ParallelConfig layout, RankCoords coords)
      : cfg_(std::move(cfg)), model_(std::move(model)), layout_(layout), coords_(coords), lr_(cfg_.lr) {}
  Status Build(std::vector<reshard::GptShard> shards);
  void DeriveModel(size_t param);
  // train_step.cc
  void DataSums(const std::vector<int64_t>& samples, std::vector<uint64_t>* acc) const;
  Status MatmulGrads(const std::vector<int64_t>& samples, Collectives& coll,
                     std::vector<std::vector<float>>* grads) const;
  void Update(const std::vector<uint64_t>& acc, const std::vector<std::vector<float>>& mm);
  // resume
  Status ApplyResumeObjects(const ShardedStateDict& loaded, const ResumeParts& parts, int64_t iteration);
  // False (with the first bad element in *bad) if a model param is not the rounding of its fp32 param.
  bool ModelMatchesMain(size_t param, int64_t* bad) const;

  TrainConfig cfg_;
  reshard::GptConfig model_;
  ParallelConfig layout_;
  RankCoords coords_;
  int rank_ = 0;
  std::vector<reshard::GptShard> shards_;
  std::vector<ShardInfo> info_;
  std::vector<Param> params_;
  std::vector<int64_t> param_base_;  // each param's first element in the concatenated local state
  int64_t local_elems_ = 0;
  std::optional<PretrainingSampler> sampler_;
  SampleLedger ledger_;
  RngState rng_;
  LrScheduler lr_;
  int64_t iteration_ = 0;
  std::vector<int64_t> step_ = std::vector<int64_t>(1, 0);  // heap: spans survive moves
};

// Missing pieces of `request` in manifest `m`: "tensor '<key>'" / "object
// '<key>' cell <c>", each once, in request order.
std::vector<std::string> MissingState(const Manifest& m, const ShardedStateDict& request);

}  // namespace ckpt::workload
