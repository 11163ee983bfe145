// ReshardModelCheckpoint: see model_reshard.h.
#include "ckpt/workload/model_reshard.h"

#include <deque>
#include <memory>
#include <optional>

#include "ckpt/format/codec.h"
#include "ckpt/workload/dist_optimizer_state.h"
#include "ckpt/workload/gpt_local_state.h"
#include "ckpt/workload/load_plan.h"
#include "ckpt/workload/train_keys.h"
#include "reshard/dist_optimizer.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"
#include "reshard/parallel_state.h"

namespace ckpt::workload {
namespace {

// A target rank's model parameters plus, when the source holds model-space
// distributed-optimizer state, that rank's optimizer fragments in the
// source's format (the optimizer is resharded with the model, never dropped),
// or, for a `ckpt train` checkpoint (metadata.train), the trainer's Adam state:
// optimizer.state.<s>.<key> fp32 in each model shard's box and replica, and
// optimizer.step on rank 0 (train_workload.h).
class ModelRankState final : public RankState {
 public:
  ModelRankState(GptLocalState s, std::unique_ptr<DistOptimizerState> opt,
                 reshard::OptimizerFormat format, bool train_state, int rank)
      : state_(std::move(s)), optimizer_(std::move(opt)), dict_(state_.StateDict()) {
    if (optimizer_) {
      ShardedStateDict o = optimizer_->StateDict(format);
      for (auto& t : o.tensors()) dict_.AddTensor(std::move(t.meta), t.data);
      for (auto& b : o.objects()) dict_.AddObject(std::move(b.meta), std::move(b.bytes));
    }
    if (train_state) AddTrainState(rank);
  }
  ShardedStateDict& dict() override { return dict_; }

 private:
  void AddTrainState(int rank) {
    const size_t n = dict_.tensors().size();  // the model's entries only
    for (size_t i = 0; i < n; ++i)
      for (const char* state : kOptimizerStates) {
        ShardedTensor t = dict_.tensors()[i].meta;
        t.key = OptimizerKey(state, t.key);
        t.dtype = DType::kFloat32;
        t.allow_shape_mismatch = dict_.tensors()[i].meta.allow_shape_mismatch;
        buffers_.push_back(std::vector<std::byte>(size_t(t.num_bytes())));
        dict_.AddTensor(std::move(t), buffers_.back());
      }
    if (rank != 0) return;
    ShardedTensor step;
    step.key = kStepTensor;
    step.dtype = DType::kInt64;
    step.global_shape = step.global_offset = step.local_shape = {1};
    step.global_offset = {0};
    buffers_.push_back(std::vector<std::byte>(8));
    dict_.AddTensor(std::move(step), buffers_.back());
  }

  GptLocalState state_;
  std::unique_ptr<DistOptimizerState> optimizer_;
  ShardedStateDict dict_;
  std::deque<std::vector<std::byte>> buffers_;  // stable addresses
};

// The source's distributed-optimizer state, from its metadata: its format
// (model-space formats reshard: model, fully_reshardable) and bucket size.
struct SourceOptimizer {
  reshard::OptimizerFormat format = reshard::OptimizerFormat::kModelSpace;
  int64_t bucket_elems = 0;
};

Result<std::optional<SourceOptimizer>> SourceOptimizerOf(const nlohmann::json& metadata) {
  const nlohmann::json opt = metadata.value("optimizer", nlohmann::json());
  if (!opt.is_object() || !opt.contains("format")) return std::optional<SourceOptimizer>();
  if (!opt["format"].is_string() || (opt.contains("bucket_elems") && !opt["bucket_elems"].is_number_integer()))
    return Status::InvalidArgument("malformed optimizer metadata: " + opt.dump().substr(0, 120));
  SourceOptimizer s;
  CKPT_ASSIGN_OR_RETURN(s.format, reshard::ParseOptimizerFormat(opt["format"].get<std::string>()));
  if (reshard::IsBucketSpace(s.format))
    return Status::FailedPrecondition("the source holds " + std::string(reshard::OptimizerFormatName(s.format)) +
                                      " optimizer state (bucket space), which loads only into its own bucket "
                                      "layout; save it with --optimizer model or fully_reshardable to reshard it");
  s.bucket_elems = opt.value("bucket_elems", int64_t{0});
  return std::optional<SourceOptimizer>(s);
}

}  // namespace

Result<ModelReshardResult> ReshardModelCheckpoint(const ModelReshardRequest& req) {
  CKPT_ASSIGN_OR_RETURN(SavedModel saved, ReadSavedModel(req.src, req.iteration));
  CKPT_ASSIGN_OR_RETURN(ParallelConfig target, ParallelConfig::Parse(req.to));
  CKPT_ASSIGN_OR_RETURN(Compression comp, ParseCompression(req.compression));
  CKPT_ASSIGN_OR_RETURN(std::optional<SourceOptimizer> source_opt, SourceOptimizerOf(saved.manifest.metadata));
  OfflineReshardOptions o;
  o.src_root = req.src;
  o.src_iteration = saved.manifest.iteration;
  o.dst_root = req.dst;
  o.world_size = target.world_size();
  o.layout = reshard::LayoutToJson(target);
  o.metadata = saved.manifest.metadata;
  o.metadata["resharded_from"] = saved.manifest.layout;
  o.write.codec.compression = comp;
  o.write.chunk_bytes = req.chunk_bytes;
  o.drop_objects.insert(req.drop_objects.begin(), req.drop_objects.end());
  o.env = req.env;
  std::optional<reshard::GptConfig> gpt;  // the distributed optimizer's rules are Megatron's
  if (source_opt) {
    CKPT_ASSIGN_OR_RETURN(gpt, reshard::RecordedGptConfig(saved.manifest.metadata, "distributed-optimizer state"));
    if (!gpt) return Status::InvalidArgument("distributed-optimizer state without a recorded model");
  }
  const bool train_state = !source_opt && saved.manifest.metadata.contains("train");
  auto stats = ReshardOffline(o, [&](int rank) -> Result<std::unique_ptr<RankState>> {
    CKPT_ASSIGN_OR_RETURN(auto shards, TargetShards(saved.model, target, rank));
    std::unique_ptr<DistOptimizerState> opt;
    if (source_opt) {
      CKPT_ASSIGN_OR_RETURN(RankCoords c, CoordsOf(target, rank));
      CKPT_ASSIGN_OR_RETURN(auto s, DistOptimizerState::Create(*gpt, target, c, shards, {source_opt->bucket_elems}));
      opt = std::make_unique<DistOptimizerState>(std::move(s));
    }
    CKPT_ASSIGN_OR_RETURN(auto state, GptLocalState::Create(std::move(shards)));
    const auto format = source_opt ? source_opt->format : reshard::OptimizerFormat::kModelSpace;
    return std::unique_ptr<RankState>(new ModelRankState(std::move(state), std::move(opt), format, train_state, rank));
  });
  if (!stats.ok()) return stats.status();
  return ModelReshardResult{*stats, saved.manifest.layout, target.ToString()};
}

}  // namespace ckpt::workload
