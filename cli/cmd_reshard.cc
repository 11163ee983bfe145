// ckpt reshard: rewrite a checkpoint under another layout, offline.
// ckpt plan:    the read plan of a load under another layout, without data.
#include <algorithm>
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
#include "cli/gpt_job.h"
#include "reshard/dist_optimizer.h"
#include "reshard/gpt_config_json.h"
#include "reshard/read_plan.h"
#include "ckpt/workload/gpt_local_state.h"
#include "ckpt/workload/dist_optimizer_state.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;

struct SavedModel {
  Manifest manifest;
  reshard::GptConfig model;
};

Result<SavedModel> ReadSavedModel(const std::string& root, int64_t iteration) {
  SavedModel s;
  CKPT_ASSIGN_OR_RETURN(s.manifest, ReadManifest(DefaultEnv(), root, iteration));
  if (!s.manifest.metadata.contains("gpt"))
    return Status::InvalidArgument("checkpoint under '" + root +
                                   "' records no GPT config in its metadata: the layout rules of its tensors are unknown");
  CKPT_ASSIGN_OR_RETURN(s.model, reshard::GptConfigFromJson(s.manifest.metadata["gpt"]));
  return s;
}

// A target rank's model parameters plus, when the source holds model-space
// distributed-optimizer state, that rank's optimizer fragments (the optimizer
// is resharded with the model, never dropped).
class GptRankState final : public RankState {
 public:
  GptRankState(workload::GptLocalState s, std::unique_ptr<workload::DistOptimizerState> opt)
      : state_(std::move(s)), optimizer_(std::move(opt)), dict_(state_.StateDict()) {
    if (!optimizer_) return;
    ShardedStateDict o = optimizer_->StateDict(reshard::OptimizerFormat::kModelSpace);
    for (auto& t : o.tensors()) dict_.AddTensor(std::move(t.meta), t.data);
    for (auto& b : o.objects()) dict_.AddObject(std::move(b.meta), std::move(b.bytes));
  }
  ShardedStateDict& dict() override { return dict_; }

 private:
  workload::GptLocalState state_;
  std::unique_ptr<workload::DistOptimizerState> optimizer_;
  ShardedStateDict dict_;
};

// Whether to carry optimizer state, from the source metadata; bucket-space
// state is tied to its bucket layout and cannot be rewritten under another one.
Result<std::optional<int64_t>> OptimizerBucketElems(const nlohmann::json& metadata) {
  const nlohmann::json opt = metadata.value("optimizer", nlohmann::json());
  if (!opt.is_object() || !opt.contains("format")) return std::optional<int64_t>();
  const std::string format = opt.value("format", std::string());
  if (format == "bucket")
    return Status::FailedPrecondition(
        "the source holds bucket-space optimizer state, which loads only into its own bucket layout; "
        "save it with --optimizer model to reshard it");
  if (format != "model") return Status::InvalidArgument("unknown optimizer format '" + format + "' in metadata");
  return std::optional<int64_t>(opt.value("bucket_elems", int64_t{0}));
}

Result<std::vector<reshard::GptShard>> TargetShards(const reshard::GptConfig& model, const ParallelConfig& pc, int rank) {
  CKPT_ASSIGN_OR_RETURN(RankCoords c, CoordsOf(pc, rank));
  return reshard::GptShards(model, pc, c);
}

int Fail(const char* cmd, const Status& st) {
  std::fprintf(stderr, "ckpt %s: %s\n", cmd, st.ToString().c_str());
  return kExitError;
}

struct ReshardFlags {
  std::string src, dst, to, compression = "none";
  std::vector<std::string> drop_objects;
  int64_t iteration = -1;
  int64_t chunk_kb = 4096;
  bool json = false;
};

int RunReshard(const ReshardFlags& f) {
  auto saved = ReadSavedModel(f.src, f.iteration);
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
  auto bucket_elems = OptimizerBucketElems(saved->manifest.metadata);
  if (!bucket_elems.ok()) return Fail("reshard", bucket_elems.status());
  auto stats = ReshardOffline(o, [&](int rank) -> Result<std::unique_ptr<RankState>> {
    CKPT_ASSIGN_OR_RETURN(auto shards, TargetShards(model, pc, rank));
    std::unique_ptr<workload::DistOptimizerState> opt;
    if (*bucket_elems) {
      CKPT_ASSIGN_OR_RETURN(RankCoords c, CoordsOf(pc, rank));
      CKPT_ASSIGN_OR_RETURN(auto o, workload::DistOptimizerState::Create(model, pc, c, shards, {**bucket_elems}));
      opt = std::make_unique<workload::DistOptimizerState>(std::move(o));
    }
    CKPT_ASSIGN_OR_RETURN(auto state, workload::GptLocalState::Create(std::move(shards)));
    return std::unique_ptr<RankState>(new GptRankState(std::move(state), std::move(opt)));
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

struct PlanFlags {
  std::string root, to, simulate, from;
  int64_t iteration = -1;
  int64_t chunk_kb = 4096;
  bool json = false, per_rank = false;
};

// Rows per chunk as the shard writer picks them: at most chunk_bytes, rows
// spread evenly (see PlanLayout, shard_layout.cc), so simulated costs match real files.
int64_t ChunkElems(const ShardedTensor& t, int64_t chunk_bytes) {
  const int64_t es = int64_t(DTypeSize(t.dtype));
  int64_t rows = t.flat_range ? t.num_elements() : (t.local_shape.empty() ? 1 : t.local_shape[0]);
  int64_t row_elems = t.flat_range || t.local_shape.empty() ? 1 : NumElements(t.local_shape) / std::max<int64_t>(rows, 1);
  if (rows == 0 || row_elems == 0) return 0;
  const int64_t max_rows = std::clamp<int64_t>(chunk_bytes / (row_elems * es), 1, rows);
  const int64_t chunks = (rows + max_rows - 1) / max_rows;
  return (rows + chunks - 1) / chunks * row_elems;
}

// The saved shard index a job of layout `from` would write: every main
// replica of every rank, file = the rank's index, chunks laid out as the
// writer would (raw sizes).
Result<std::vector<reshard::SavedShard>> SimulatedSaved(const reshard::GptConfig& model, const ParallelConfig& from,
                                                        int64_t chunk_bytes) {
  std::vector<reshard::SavedShard> saved;
  for (int r = 0; r < from.world_size(); ++r) {
    CKPT_ASSIGN_OR_RETURN(auto shards, TargetShards(model, from, r));
    for (const auto& g : shards) {
      if (!g.tensor.is_main_replica()) continue;
      reshard::SavedShard ss{g.tensor, r, ChunkElems(g.tensor, chunk_bytes), {}};
      const int64_t n = g.tensor.num_elements();
      const int64_t chunks = ss.chunk_elems > 0 ? (n + ss.chunk_elems - 1) / ss.chunk_elems : 0;
      ss.chunk_stored_bytes.assign(size_t(chunks), ss.chunk_elems * int64_t(DTypeSize(g.tensor.dtype)));
      saved.push_back(std::move(ss));
    }
  }
  return saved;
}

Result<SavedModel> SavedForPlan(const PlanFlags& f, std::vector<reshard::SavedShard>* shards) {
  SavedModel saved;
  if (!f.simulate.empty()) {
    std::string name;
    CKPT_ASSIGN_OR_RETURN(saved.model, ResolveModel(f.simulate, "", -1, &name));  // preset[:k=v,...]
    CKPT_ASSIGN_OR_RETURN(ParallelConfig from, ParallelConfig::Parse(f.from));
    CKPT_ASSIGN_OR_RETURN(*shards, SimulatedSaved(saved.model, from, f.chunk_kb * 1024));
    saved.manifest.layout = reshard::LayoutToJson(from);
    for (int r = 0; r < from.world_size(); ++r) saved.manifest.files.push_back({ShardFileName(r), r, 0});
    for (const auto& s : *shards)
      for (int64_t b : s.chunk_stored_bytes) saved.manifest.files[s.file_index].size += uint64_t(b);
    return saved;
  }
  if (f.root.empty()) return Status::InvalidArgument("give a checkpoint root, or --simulate <preset> --from <layout>");
  CKPT_ASSIGN_OR_RETURN(saved, ReadSavedModel(f.root, f.iteration));
  *shards = SavedShardsOf(saved.manifest);
  return saved;
}

// Stored bytes of the distinct chunks the given plans read together: what a
// read-sharing group (load_share.h) reads from disk.
int64_t UnionBytes(const std::set<const reshard::ReadPlan*>& plans, const std::vector<reshard::SavedShard>& shards) {
  std::set<std::pair<int, int64_t>> chunks;
  for (const auto* p : plans)
    for (const auto& rp : p->requests)
      for (const auto& cr : rp.reads) chunks.insert({cr.saved_shard, cr.chunk});
  int64_t n = 0;
  for (const auto& [s, c] : chunks) n += shards[s].chunk_stored_bytes[c];
  return n;
}

int RunPlan(const PlanFlags& f) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<reshard::SavedShard> shards;
  auto saved = SavedForPlan(f, &shards);
  if (!saved.ok()) return Fail("plan", saved.status());
  auto target = ParallelConfig::Parse(f.to);
  if (!target.ok()) return Fail("plan", target.status());
  json ranks = json::array();
  std::map<std::string, reshard::ReadPlan> plans;
  int64_t total = 0, mx = 0, mn = INT64_MAX;
  std::map<int, std::set<const reshard::ReadPlan*>> dp_groups;
  std::set<const reshard::ReadPlan*> all_plans;
  for (int r = 0; r < target->world_size(); ++r) {
    auto want = TargetShards(saved->model, *target, r);
    if (!want.ok()) return Fail("plan", want.status());
    std::vector<ShardedTensor> requests;
    std::string key;  // ranks requesting identical descriptors (DP replicas) share one plan
    for (const auto& g : *want) {
      requests.push_back(g.tensor);
      key += g.tensor.DebugString();
      key += ';';
    }
    auto cached = plans.find(key);
    if (cached == plans.end()) {
      auto computed = reshard::PlanReads(shards, requests);
      if (!computed.ok()) return Fail("plan", computed.status().WithContext("target rank " + std::to_string(r)));
      cached = plans.emplace(std::move(key), std::move(computed).value()).first;
    }
    const reshard::ReadPlan* plan = &cached->second;
    auto coords = CoordsOf(*target, r);
    if (!coords.ok()) return Fail("plan", coords.status());
    dp_groups[coords->tp + target->tp * coords->pp].insert(plan);  // as `ckpt load --share-reads dp`
    all_plans.insert(plan);
    if (f.per_rank) {
      std::vector<std::string> files;
      for (int fi : plan->files) files.push_back(saved->manifest.files[fi].name);
      ranks.push_back({{"rank", r}, {"bytes_read", plan->bytes_read}, {"chunks", plan->chunks_read},
                       {"tensors", requests.size()}, {"files", files}});
    }
    total += plan->bytes_read;
    mx = std::max(mx, plan->bytes_read);
    mn = std::min(mn, plan->bytes_read);
  }
  int64_t dp_shared = 0;
  for (const auto& [color, group] : dp_groups) dp_shared += UnionBytes(group, shards);
  const int64_t job_shared = UnionBytes(all_plans, shards);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  json out = {{"bytes_read_total_share_dp", dp_shared}, {"bytes_read_total_share_job", job_shared},{"from", saved->manifest.layout}, {"to", target->ToString()}, {"ranks", target->world_size()},
              {"bytes_read_total", total}, {"bytes_read_max_rank", mx}, {"bytes_read_min_rank", mn},
              {"checkpoint_bytes", saved->manifest.TotalStoredBytes()}, {"plan_seconds", secs},
              {"distinct_plans", plans.size()}};
  out["saved_shards"] = shards.size();
  if (f.per_rank) out["per_rank"] = ranks;
  if (f.json) {
    std::printf("%s\n", out.dump(1).c_str());
    return kExitOk;
  }
  std::printf("plan %s -> %s: %d ranks read %.1f MB in total (checkpoint %.1f MB), per rank max %.1f / min %.1f MB; planned in %.3f s\n",
              saved->manifest.layout.dump().c_str(), target->ToString().c_str(), target->world_size(), total / 1e6,
              saved->manifest.TotalStoredBytes() / 1e6, mx / 1e6, mn / 1e6, secs);
  std::printf("plan with read sharing: %.1f MB from disk with --share-reads dp (%zu groups), %.1f MB with job\n",
              dp_shared / 1e6, dp_groups.size(), job_shared / 1e6);
  if (f.per_rank)
    for (const auto& r : ranks)
      std::printf("  rank %3d: %10.3f MB, %5lld chunks, %zu files\n", r["rank"].get<int>(),
                  r["bytes_read"].get<int64_t>() / 1e6, static_cast<long long>(r["chunks"].get<int64_t>()),
                  r["files"].size());
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
  auto f = std::make_shared<PlanFlags>();
  cmd->add_option("root", f->root, "checkpoint root (or use --simulate)");
  cmd->add_option("--to", f->to, "target layout, e.g. tp=2,pp=1,dp=1")->required();
  cmd->add_option("--iter", f->iteration, "iteration (default: the latest: the newest committed one at or above the tracker's)");
  cmd->add_option("--simulate", f->simulate, "plan a checkpoint of this GPT preset that was never written (e.g. llama70b)");
  cmd->add_option("--from", f->from, "with --simulate: the layout it was saved with");
  cmd->add_option("--chunk-kb", f->chunk_kb, "with --simulate: chunk size of the simulated files");
  cmd->add_flag("--per-rank", f->per_rank, "one line (or JSON entry) per target rank");
  cmd->add_flag("--json", f->json, "machine-readable output");
  cmd->callback([=]() { *exit_code = RunPlan(*f); });
}

}  // namespace ckpt::cli
