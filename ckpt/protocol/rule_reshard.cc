// Plan / reshard / consolidate by per-key rules: see rule_reshard.h.
#include "ckpt/protocol/rule_reshard.h"

#include <fnmatch.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <set>

#include "ckpt/base/clock.h"
#include "ckpt/format/codec.h"
#include "ckpt/protocol/checkpoint.h"
#include "reshard/geometry/read_plan.h"

namespace ckpt {
namespace {

using nlohmann::json;

Result<int> ParseField(const std::string& rule, const std::string& field, const std::string& name, int min) {
  const std::string prefix = name + "=";
  int v = 0;
  const char* end = field.data() + field.size();
  if (field.rfind(prefix, 0) != 0 || std::from_chars(field.data() + prefix.size(), end, v).ptr != end || v < min)
    return Status::InvalidArgument("shard rule '" + rule + "': expected " + name + "=<integer >= " +
                                   std::to_string(min) + ">, got '" + field + "' (form: KEY_GLOB:axis=A:parts=P)");
  return v;
}

// One saved descriptor per key (global shape, dtype, flags), keys sorted.
std::map<std::string, const ShardedTensor*> KeysOf(const Manifest& m) {
  std::map<std::string, const ShardedTensor*> keys;
  for (const auto& s : m.shards) keys.emplace(s.meta.key, &s.meta);
  return keys;
}

const ShardRule* RuleFor(const RuleLayout& layout, const std::string& key) {
  for (const auto& r : layout.rules)
    if (fnmatch(r.glob.c_str(), key.c_str(), 0) == 0) return &r;
  return nullptr;
}

// Target rank `rank`'s descriptor of one key under its rule (nullptr: whole).
Result<ShardedTensor> TargetOf(const ShardedTensor& saved, const ShardRule* rule, int rank) {
  ShardedTensor t;
  t.key = saved.key;
  t.dtype = saved.dtype;
  t.global_shape = saved.global_shape;
  t.allow_shape_mismatch = saved.allow_shape_mismatch;
  t.global_offset.assign(t.global_shape.size(), 0);
  t.local_shape = t.global_shape;
  const int parts = rule ? rule->parts : 1;
  if (rule) {
    if (rule->axis >= int(t.global_shape.size()))
      return Status::InvalidArgument("shard rule '" + rule->text + "': tensor '" + t.key + "' of shape " +
                                     ShapeToString(t.global_shape) + " has no axis " + std::to_string(rule->axis) +
                                     " (narrow the glob)");
    const int64_t len = t.global_shape[size_t(rule->axis)];
    if (parts > len)
      return Status::InvalidArgument("shard rule '" + rule->text + "': tensor '" + t.key + "' has " +
                                     std::to_string(len) + " elements along axis " + std::to_string(rule->axis) +
                                     ", fewer than " + std::to_string(parts) + " parts");
    const int64_t part = rank % parts;
    const int64_t begin = part * len / parts, end = (part + 1) * len / parts;
    t.global_offset[size_t(rule->axis)] = begin;
    t.local_shape[size_t(rule->axis)] = end - begin;
  }
  t.replica_id = {int32_t(rank / parts)};
  return t;
}

// A target rank's tensors with owned zeroed buffers (ReshardOffline fills them).
class RuleRankState final : public RankState {
 public:
  explicit RuleRankState(std::vector<ShardedTensor> tensors) {
    for (auto& t : tensors) {
      buffers_.emplace_back(size_t(t.num_bytes()));
      dict_.AddTensor(std::move(t), buffers_.back());
    }
  }
  ShardedStateDict& dict() override { return dict_; }

 private:
  std::deque<std::vector<std::byte>> buffers_;  // stable addresses
  ShardedStateDict dict_;
};


}  // namespace

Result<ShardRule> ParseShardRule(const std::string& text) {
  const size_t p2 = text.rfind(':');
  const size_t p1 = p2 == std::string::npos || p2 == 0 ? std::string::npos : text.rfind(':', p2 - 1);
  if (p1 == std::string::npos || p1 == 0)
    return Status::InvalidArgument("shard rule '" + text + "': expected KEY_GLOB:axis=A:parts=P");
  ShardRule r;
  r.text = text;
  r.glob = text.substr(0, p1);
  CKPT_ASSIGN_OR_RETURN(r.axis, ParseField(text, text.substr(p1 + 1, p2 - p1 - 1), "axis", 0));
  CKPT_ASSIGN_OR_RETURN(r.parts, ParseField(text, text.substr(p2 + 1), "parts", 1));
  return r;
}

json RuleLayout::ToJson() const {
  json shard = json::array();
  for (const auto& r : rules) shard.push_back(r.text);
  return {{"ranks", ranks}, {"shard", shard}};
}

Result<RuleLayout> ParseRuleLayout(int ranks, const std::vector<std::string>& rules) {
  if (ranks < 1) return Status::InvalidArgument("target ranks must be >= 1, got " + std::to_string(ranks));
  RuleLayout l;
  l.ranks = ranks;
  for (const auto& text : rules) {
    CKPT_ASSIGN_OR_RETURN(ShardRule r, ParseShardRule(text));
    if (ranks % r.parts != 0)
      return Status::InvalidArgument("shard rule '" + text + "': " + std::to_string(r.parts) +
                                     " parts do not divide " + std::to_string(ranks) + " target ranks");
    l.rules.push_back(std::move(r));
  }
  return l;
}

Result<std::vector<ShardedTensor>> RuleTargetTensors(const Manifest& m, const RuleLayout& layout, int rank,
                                                     bool main_only) {
  std::vector<ShardedTensor> out;
  for (const auto& [key, saved] : KeysOf(m)) {
    CKPT_ASSIGN_OR_RETURN(ShardedTensor t, TargetOf(*saved, RuleFor(layout, key), rank));
    if (!main_only || t.is_main_replica()) out.push_back(std::move(t));
  }
  return out;
}

Result<json> PlanByRules(const std::string& root, int64_t iteration, const RuleLayout& layout, bool per_rank) {
  const auto t0 = std::chrono::steady_clock::now();
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(nullptr, root, iteration));
  const std::vector<reshard::SavedShard> shards = SavedShardsOf(m);
  std::map<std::string, reshard::ReadPlan> distinct;  // ranks holding the same boxes share a plan
  std::vector<const reshard::ReadPlan*> of_rank;
  json ranks = json::array();
  int64_t total = 0, mx = 0, mn = INT64_MAX;
  for (int r = 0; r < layout.ranks; ++r) {
    CKPT_ASSIGN_OR_RETURN(auto want, RuleTargetTensors(m, layout, r));
    std::string key;
    for (auto& t : want) {
      t.replica_id.clear();
      key += t.DebugString() + ';';
    }
    auto it = distinct.find(key);
    if (it == distinct.end()) {
      auto plan = reshard::PlanReads(shards, want);
      if (!plan.ok()) return plan.status().WithContext("target rank " + std::to_string(r));
      it = distinct.emplace(std::move(key), std::move(plan).value()).first;
    }
    const reshard::ReadPlan& plan = it->second;
    of_rank.push_back(&plan);
    total += plan.bytes_read;
    mx = std::max(mx, plan.bytes_read);
    mn = std::min(mn, plan.bytes_read);
    if (per_rank) {
      std::vector<std::string> files;
      for (int fi : plan.files) files.push_back(m.files[size_t(fi)].name);
      ranks.push_back({{"rank", r}, {"bytes_read", plan.bytes_read}, {"chunks", plan.chunks_read},
                       {"tensors", want.size()}, {"files", files}});
    }
  }
  json out = {{"from", m.layout}, {"to", layout.ToJson()}, {"ranks", layout.ranks},
              {"bytes_read_total", total}, {"bytes_read_max_rank", mx}, {"bytes_read_min_rank", mn},
              {"bytes_read_total_share_job",
               reshard::UnionStoredBytes(std::set<const reshard::ReadPlan*>(of_rank.begin(), of_rank.end()), shards)},
              {"checkpoint_bytes", m.TotalStoredBytes()}, {"distinct_plans", distinct.size()},
              {"saved_shards", shards.size()},
              {"plan_seconds", Since(t0)}};
  if (per_rank) out["per_rank"] = ranks;
  return out;
}

std::string RulePlanText(const json& p) {
  char line[512];
  std::snprintf(line, sizeof line,
                "plan %s -> %s: %d ranks read %.1f MB in total (%.1f MB distinct; checkpoint %.1f MB), per rank "
                "max %.1f / min %.1f MB; planned in %.3f s\n",
                p["from"].dump().c_str(), p["to"].dump().c_str(), p["ranks"].get<int>(),
                p["bytes_read_total"].get<double>() / 1e6, p["bytes_read_total_share_job"].get<double>() / 1e6,
                p["checkpoint_bytes"].get<double>() / 1e6, p["bytes_read_max_rank"].get<double>() / 1e6,
                p["bytes_read_min_rank"].get<double>() / 1e6, p["plan_seconds"].get<double>());
  std::string out = line;
  if (p.contains("per_rank"))
    for (const auto& r : p["per_rank"]) {
      std::snprintf(line, sizeof line, "  rank %3d: %10.3f MB, %5lld chunks, %zu files\n", r["rank"].get<int>(),
                    r["bytes_read"].get<double>() / 1e6, static_cast<long long>(r["chunks"].get<int64_t>()),
                    r["files"].size());
      out += line;
    }
  return out;
}

Result<OfflineReshardStats> ReshardByRules(const RuleReshardRequest& req) {
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(nullptr, req.src, req.iteration));
  CKPT_ASSIGN_OR_RETURN(Compression comp, ParseCompression(req.compression));
  // Rule errors (an axis a tensor lacks) before anything is written.
  for (int r = 0; r < req.layout.ranks; ++r) CKPT_RETURN_IF_ERROR(RuleTargetTensors(m, req.layout, r).status());
  OfflineReshardOptions o;
  o.src_root = req.src;
  o.src_iteration = m.iteration;
  o.dst_root = req.dst;
  o.world_size = req.layout.ranks;
  o.layout = req.layout.ToJson();
  o.metadata = m.metadata;
  o.metadata["resharded_from"] = m.layout;
  o.write.codec.compression = comp;
  o.write.chunk_bytes = req.chunk_bytes;
  o.drop_objects.insert(req.drop_objects.begin(), req.drop_objects.end());
  // Each rank loads only what it writes (its main replicas): replicas add reads, not state.
  return ReshardOffline(o, [&](int rank) -> Result<std::unique_ptr<RankState>> {
    CKPT_ASSIGN_OR_RETURN(auto tensors, RuleTargetTensors(m, req.layout, rank, /*main_only=*/true));
    return std::unique_ptr<RankState>(new RuleRankState(std::move(tensors)));
  });
}

}  // namespace ckpt
