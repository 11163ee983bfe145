// ckpt reshard: rewrite a checkpoint under another layout, offline.
// ckpt plan:    the read plan of a load under another layout, without data
//               (library: ckpt/workload/load_plan.h).
#include <algorithm>
#include <deque>
#include <chrono>
#include <map>
#include <set>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/offline_reshard.h"
#include "cli/commands.h"
#include "ckpt/workload/load_plan.h"
#include "reshard/dist_optimizer.h"
#include "reshard/gpt_config_json.h"
#include "reshard/read_plan.h"
#include "ckpt/workload/gpt_local_state.h"
#include "ckpt/workload/dist_optimizer_state.h"
#include "ckpt/workload/train_keys.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;

// A target rank's model parameters plus, when the source holds model-space
// distributed-optimizer state, that rank's optimizer fragments in the
// source's format (the optimizer is resharded with the model, never dropped),
// or, for a `ckpt train` checkpoint (metadata.train), the trainer's Adam state:
// optimizer.state.<s>.<key> fp32 in each model shard's box and replica, and
// optimizer.step on rank 0 (train_workload.h).
class GptRankState final : public RankState {
 public:
  GptRankState(workload::GptLocalState s, std::unique_ptr<workload::DistOptimizerState> opt,
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
      for (const char* state : workload::kOptimizerStates) {
        ShardedTensor t = dict_.tensors()[i].meta;
        t.key = workload::OptimizerKey(state, t.key);
        t.dtype = DType::kFloat32;
        t.allow_shape_mismatch = dict_.tensors()[i].meta.allow_shape_mismatch;
        buffers_.push_back(std::vector<std::byte>(size_t(t.num_bytes())));
        dict_.AddTensor(std::move(t), buffers_.back());
      }
    if (rank != 0) return;
    ShardedTensor step;
    step.key = workload::kStepTensor;
    step.dtype = DType::kInt64;
    step.global_shape = step.global_offset = step.local_shape = {1};
    step.global_offset = {0};
    buffers_.push_back(std::vector<std::byte>(8));
    dict_.AddTensor(std::move(step), buffers_.back());
  }

  workload::GptLocalState state_;
  std::unique_ptr<workload::DistOptimizerState> optimizer_;
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

int Fail(const char* cmd, const Status& st) {
  std::fprintf(stderr, "ckpt %s: %s\n", cmd, st.ToString().c_str());
  return ExitCodeOf(st);
}

struct ReshardFlags {
  std::string src, dst, to, compression = "none";
  std::vector<std::string> drop_objects;
  int64_t iteration = -1;
  int64_t chunk_kb = 4096;
  bool json = false;
};

int RunReshard(const ReshardFlags& f) {
  auto saved = workload::ReadSavedModel(f.src, f.iteration);
  if (!saved.ok()) return Fail("reshard", saved.status());
  auto target = ParallelConfig::Parse(f.to);
  if (!target.ok()) return Fail("reshard", target.status());
  auto comp = ParseCompression(f.compression);
  if (!comp.ok()) return Fail("reshard", comp.status());
  OfflineReshardOptions o;
  o.src_root = f.src;
  o.src_iteration = saved->manifest.iteration;
  o.dst_root = f.dst;
  o.world_size = target->world_size();
  o.layout = reshard::LayoutToJson(*target);
  o.metadata = saved->manifest.metadata;
  o.metadata["resharded_from"] = saved->manifest.layout;
  o.write.codec.compression = *comp;
  o.write.chunk_bytes = f.chunk_kb * 1024;
  o.drop_objects.insert(f.drop_objects.begin(), f.drop_objects.end());
  const reshard::GptConfig model = saved->model;
  const ParallelConfig pc = *target;
  auto source_opt = SourceOptimizerOf(saved->manifest.metadata);
  if (!source_opt.ok()) return Fail("reshard", source_opt.status());
  const bool train_state = !*source_opt && saved->manifest.metadata.contains("train");
  auto stats = ReshardOffline(o, [&](int rank) -> Result<std::unique_ptr<RankState>> {
    CKPT_ASSIGN_OR_RETURN(auto shards, workload::TargetShards(model, pc, rank));
    std::unique_ptr<workload::DistOptimizerState> opt;
    if (*source_opt) {
      CKPT_ASSIGN_OR_RETURN(RankCoords c, CoordsOf(pc, rank));
      CKPT_ASSIGN_OR_RETURN(auto o, workload::DistOptimizerState::Create(model, pc, c, shards, {(*source_opt)->bucket_elems}));
      opt = std::make_unique<workload::DistOptimizerState>(std::move(o));
    }
    CKPT_ASSIGN_OR_RETURN(auto state, workload::GptLocalState::Create(std::move(shards)));
    const auto format = *source_opt ? (*source_opt)->format : reshard::OptimizerFormat::kModelSpace;
    return std::unique_ptr<RankState>(new GptRankState(std::move(state), std::move(opt), format, train_state, rank));
  });
  if (!stats.ok()) return Fail("reshard", stats.status());
  json out = {{"op", "reshard"}, {"from", saved->manifest.layout}, {"to", pc.ToString()},
              {"iteration", stats->src_iteration}, {"bytes_read", stats->bytes_read},
              {"bytes_written", stats->bytes_written}, {"seconds", stats->seconds}};
  if (f.json) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("reshard iter %lld %s -> %s: read %.1f MB, wrote %.1f MB in %.3f s; committed under %s\n",
                static_cast<long long>(stats->src_iteration), saved->manifest.layout.dump().c_str(),
                pc.ToString().c_str(), stats->bytes_read / 1e6, stats->bytes_written / 1e6, stats->seconds,
                f.dst.c_str());
  }
  return kExitOk;
}

int RunPlan(const workload::LoadPlanRequest& req, bool json_out) {
  auto plan = workload::PlanLoad(req);
  if (!plan.ok()) return Fail("plan", plan.status());
  std::fputs(json_out ? (plan->dump(1) + "\n").c_str() : workload::PlanText(*plan).c_str(), stdout);
  return kExitOk;
}

}  // namespace

void RegisterReshard(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("reshard", "Rewrite a checkpoint under another layout (offline, committed atomically)");
  auto f = std::make_shared<ReshardFlags>();
  cmd->add_option("src", f->src, "source checkpoint root")->required();
  cmd->add_option("dst", f->dst, "destination checkpoint root")->required();
  cmd->add_option("--to", f->to, "target layout, e.g. tp=2,pp=1,dp=1")->required();
  cmd->add_option("--iter", f->iteration, "source iteration (default: the latest: the newest committed one at or above the tracker's)");
  cmd->add_option("--compress", f->compression, "none or zstd");
  cmd->add_option("--chunk-kb", f->chunk_kb, "target chunk size in KiB");
  cmd->add_option("--drop-object", f->drop_objects,
                  "leave out this per-rank object key (e.g. a (pp, tp)-grid RNG state under another TP); repeatable");
  cmd->add_flag("--json", f->json, "machine-readable output");
  cmd->callback([=]() { *exit_code = RunReshard(*f); });
}

void RegisterPlan(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("plan", "Print the read plan of loading a checkpoint under another layout (no data read)");
  auto f = std::make_shared<workload::LoadPlanRequest>();
  auto chunk_kb = std::make_shared<int64_t>(4096);
  auto json_out = std::make_shared<bool>(false);
  cmd->add_option("root", f->root, "checkpoint root (or use --simulate)");
  cmd->add_option("--to", f->to, "target layout, e.g. tp=2,pp=1,dp=1")->required();
  cmd->add_option("--iter", f->iteration, "iteration (default: the latest: the newest committed one at or above the tracker's)");
  cmd->add_option("--simulate", f->simulate, "plan a checkpoint of this GPT preset that was never written (e.g. llama70b)");
  cmd->add_option("--from", f->from, "with --simulate: the layout it was saved with");
  cmd->add_option("--chunk-kb", *chunk_kb, "with --simulate: chunk size of the simulated files");
  cmd->add_flag("--per-rank", f->per_rank, "one line (or JSON entry) per target rank");
  cmd->add_flag("--json", *json_out, "machine-readable output");
  cmd->callback([=]() {
    f->chunk_bytes = *chunk_kb * 1024;
    *exit_code = RunPlan(*f, *json_out);
  });
}

}  // namespace ckpt::cli
