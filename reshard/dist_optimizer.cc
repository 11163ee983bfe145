// Distributed-optimizer layout: MCore buffer/bucket arithmetic, DP ownership,
// and the grouping of a GPT rank's parameters into DDP buffers.
#include "reshard/dist_optimizer.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <numeric>

#include "reshard/megatron_moe.h"

namespace ckpt::reshard {
namespace {

std::string Str(int64_t v) { return std::to_string(v); }
int64_t PadTo(int64_t v, int64_t divisor) { return (v + divisor - 1) / divisor * divisor; }

// "model3.decoder.layers.5." of a layer parameter, or "" outside layers.
std::string LayerPrefix(const std::string& name) {
  const std::string tag = "decoder.layers.";
  const size_t at = name.find(tag);
  if (at == std::string::npos) return "";
  const size_t dot = name.find('.', at + tag.size());
  return dot == std::string::npos ? "" : name.substr(0, dot + 1);
}

// Registration order inside a TransformerLayer: Attention.__init__ builds
// linear_proj, then SelfAttention.__init__ builds linear_qkv; so in
// named_parameters linear_proj comes first although the forward (and
// GptShards' module order) runs qkv first. With the Transformer Engine spec
// the input norm is linear_qkv's layer_norm_weight (TE LayerNormLinear
// registers it before its weight), so it follows linear_proj; the local
// spec's input_layernorm module comes before the attention. The pre-MLP norm
// (fused into fc1, or a module of its own) precedes the rest of the MLP either way.
int RegistrationRank(const std::string& rest, bool te_spec) {
  static const char* kLocal[] = {"input_layernorm.", "self_attention.linear_proj.",
                                 "self_attention.linear_qkv.", "pre_mlp_layernorm."};
  static const char* kTe[] = {"self_attention.linear_proj.", "input_layernorm.",
                              "self_attention.linear_qkv.", "pre_mlp_layernorm."};
  const char* const* order = te_spec ? kTe : kLocal;
  for (int i = 0; i < 4; ++i)
    if (rest.rfind(order[i], 0) == 0) return i;
  return 4;  // the MLP (router, experts, fc1, fc2: already in registration order)
}

struct ParamInfo {
  std::string name;
  int64_t numel = 0;
  DType dtype = DType::kBFloat16;
  int chunk = 0;
  bool expert = false;
  bool shared_embedding = false;
};

int ChunkOf(const std::string& name, int vpp) {
  if (vpp <= 1 || name.rfind("model", 0) != 0) return 0;
  return std::atoi(name.c_str() + 5);  // "model<v>." (megatron_gpt.h prefixes)
}

bool EndsWith(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Unique parameters in MCore named_parameters order, classified.
std::vector<ParamInfo> McoreParams(const GptConfig& cfg, const ParallelConfig& pc,
                                   const std::vector<GptShard>& shards) {
  std::vector<ParamInfo> params;
  std::map<std::string, bool> seen;
  for (const GptShard& g : shards) {
    if (seen[g.param]) continue;
    seen[g.param] = true;
    ParamInfo p;
    p.name = g.param;
    p.numel = NumElements(g.param_shape);
    p.dtype = g.tensor.dtype;
    p.chunk = ChunkOf(g.param, pc.vpp);
    p.expert = pc.ep > 1 && IsExpertParam(g.param);  // allreduce = not (expert and EP > 1)
    // LanguageModule.setup_embeddings_and_output_layer marks both tied copies.
    p.shared_embedding = cfg.tied_embeddings && pc.pp > 1 &&
                         (EndsWith(g.param, "embedding.word_embeddings.weight") ||
                          EndsWith(g.param, "output_layer.weight"));
    params.push_back(std::move(p));
  }
  for (size_t i = 0; i < params.size();) {  // reorder within each layer
    const std::string prefix = LayerPrefix(params[i].name);
    size_t j = i + 1;
    while (j < params.size() && !prefix.empty() && LayerPrefix(params[j].name) == prefix) ++j;
    const bool te = cfg.norm_keys == GptConfig::NormKeys::kTe;
    std::stable_sort(params.begin() + i, params.begin() + j, [&](const auto& a, const auto& b) {
      return RegistrationRank(a.name.substr(prefix.size()), te) <
             RegistrationRank(b.name.substr(prefix.size()), te);
    });
    i = j;
  }
  return params;
}

// Index of the group holding `rank` among all groups of kind `g` ("dp_group_idx").
Result<int> GroupIndex(const ParallelConfig& pc, int rank, Group g) {
  CKPT_ASSIGN_OR_RETURN(auto groups, AllGroups(pc, g));
  for (size_t i = 0; i < groups.size(); ++i)
    if (std::find(groups[i].begin(), groups[i].end(), rank) != groups[i].end()) return int(i);
  return Status::Internal("rank " + Str(rank) + " is in no " + std::string(GroupName(g)) + " group");
}

}  // namespace

std::string_view OptimizerFormatName(OptimizerFormat f) {
  switch (f) {
    case OptimizerFormat::kModelSpace: return "model";
    case OptimizerFormat::kBucketSpace: return "bucket";
    case OptimizerFormat::kFullyReshardable: return "fully_reshardable";
    case OptimizerFormat::kDpReshardable: return "dp_reshardable";
  }
  return "?";
}

Result<OptimizerFormat> ParseOptimizerFormat(std::string_view name) {
  for (OptimizerFormat f : {OptimizerFormat::kModelSpace, OptimizerFormat::kBucketSpace,
                            OptimizerFormat::kFullyReshardable, OptimizerFormat::kDpReshardable})
    if (name == OptimizerFormatName(f)) return f;
  if (name == "fully_sharded_model_space") return OptimizerFormat::kModelSpace;  // MCore's name
  return Status::InvalidArgument("unknown optimizer format '" + std::string(name) +
                                 "' (known: fully_reshardable, dp_reshardable, model, bucket)");
}

bool IsBucketSpace(OptimizerFormat f) {
  return f == OptimizerFormat::kBucketSpace || f == OptimizerFormat::kDpReshardable;
}

bool IsModelSpace(OptimizerFormat f) { return !IsBucketSpace(f); }

const std::array<const char*, 3>& AdamStateNames(OptimizerFormat f) {
  return f == OptimizerFormat::kModelSpace || f == OptimizerFormat::kBucketSpace ? kAdamStates
                                                                                  : kMcoreAdamStates;
}

std::string McoreBufferDtypeName(DType param_dtype) {
  switch (param_dtype) {
    case DType::kBFloat16: return "(torch.bfloat16, torch.float32)";  // grads accumulate in fp32
    case DType::kFloat16: return "(torch.float16, torch.float16)";
    case DType::kFloat32: return "(torch.float32, torch.float32)";
    default: return "(" + std::string(DTypeName(param_dtype)) + ", torch.float32)";
  }
}

int64_t BufferLayout::SliceElems(int bucket) const {
  const Bucket& b = buckets.at(size_t(bucket));
  return (b.end - b.start) / dp_size;
}

Result<BufferLayout> LayoutBuffer(const std::vector<BufferParam>& model_order, int dp_size,
                                  int64_t bucket_elems) {
  if (dp_size < 1) return Status::InvalidArgument("LayoutBuffer: dp_size=" + Str(dp_size));
  BufferLayout L;
  L.dp_size = dp_size;
  L.params.assign(model_order.rbegin(), model_order.rend());  // backprop order
  const int64_t bucket_divisor = std::lcm(int64_t(dp_size), int64_t(128));
  int64_t param_start = 0, param_end = 0, bucket_start = 0;
  int first_in_bucket = 0;
  auto close = [&](int64_t end_unpadded, int next_param) {
    Bucket b{bucket_start, PadTo(end_unpadded, bucket_divisor), end_unpadded - bucket_start,
             first_in_bucket, next_param - first_in_bucket};
    L.buckets.push_back(b);
    bucket_start = b.end;
    first_in_bucket = next_param;
    return b.end;
  };
  for (int i = 0; i < int(L.params.size()); ++i) {
    const BufferParam& p = L.params[size_t(i)];
    if (p.numel < 0) return Status::InvalidArgument("parameter '" + p.name + "': negative numel");
    param_start = PadTo(param_start, 64);  // 128-byte aligned starts for >= 16-bit params
    if (p.shared_embedding && i > first_in_bucket) param_start = close(param_start, i);
    param_end = param_start + p.numel;
    L.starts.push_back(param_start);
    const bool full = bucket_elems > 0 && param_end - bucket_start >= bucket_elems;
    param_start = full || p.shared_embedding ? close(param_end, i + 1) : param_end;
  }
  if (first_in_bucket < int(L.params.size())) close(param_end, int(L.params.size()));
  return L;
}

std::vector<OwnedRange> OwnedRanges(const BufferLayout& layout, int dp_rank) {
  std::vector<OwnedRange> out;
  int64_t slices_before = 0;  // this rank's slices of earlier buckets
  for (int b = 0; b < int(layout.buckets.size()); ++b) {
    const Bucket& bk = layout.buckets[size_t(b)];
    const int64_t slice = layout.SliceElems(b);
    const int64_t lo = bk.start + dp_rank * slice, hi = lo + slice;
    for (int i = bk.first_param; i < bk.first_param + bk.num_params; ++i) {
      const int64_t ps = layout.starts[size_t(i)], pe = ps + layout.params[size_t(i)].numel;
      const int64_t a = std::max(ps, lo), e = std::min(pe, hi);
      if (a < e) out.push_back({i, b, a - ps, e - ps, slices_before + (a - lo)});
    }
    slices_before += slice;
  }
  return out;
}

Result<std::vector<RankBuffer>> GptRankBuffers(const GptConfig& cfg, const ParallelConfig& pc,
                                               const RankCoords& coords,
                                               const std::vector<GptShard>& model_shards,
                                               const DistOptOptions& opts) {
  CKPT_ASSIGN_OR_RETURN(int rank, RankOf(pc, coords));
  CKPT_ASSIGN_OR_RETURN(int dense_group, GroupIndex(pc, rank, Group::kDpCp));
  CKPT_ASSIGN_OR_RETURN(int expert_group, GroupIndex(pc, rank, Group::kExpertDp));
  const std::vector<ParamInfo> params = McoreParams(cfg, pc, model_shards);
  std::vector<RankBuffer> out;
  int gbuf[2] = {0, 0};  // dense, expert: MCore's optimizers chain the chunks' buffers
  const bool has_experts = std::any_of(params.begin(), params.end(), [](const ParamInfo& p) { return p.expert; });
  for (int chunk = 0; chunk < pc.vpp; ++chunk) {
    for (bool expert : {false, true}) {
      std::vector<DType> dtypes;  // one buffer per dtype, in order of first appearance
      for (const ParamInfo& p : params)
        if (p.chunk == chunk && p.expert == expert &&
            std::find(dtypes.begin(), dtypes.end(), p.dtype) == dtypes.end())
          dtypes.push_back(p.dtype);
      for (DType dt : dtypes) {
        RankBuffer rb;
        rb.chunk = chunk;
        rb.expert = expert;
        rb.dtype = dt;
        rb.gbuf_index = gbuf[expert]++;
        rb.dp_domain = expert ? "expert_dp_group_idx_" + Str(expert_group)
                              : "dp_group_idx_" + Str(dense_group);
        rb.dp_rank = expert ? coords.expert_dp : DpCpRank(pc, coords);
        // MCore's data_parallel_group_idx: the rank in the optimizer's model-
        // parallel group, TP x PP for dense buffers and expert TP x EP x PP
        // (parallel_state 'tp-ep-pp', expert TP == TP here) for expert ones, so
        // the EP ranks of one expert-DP group write distinct keys.
        rb.mp_rank = expert ? coords.tp + pc.tp * (coords.ep + pc.ep * coords.pp)
                            : coords.tp + pc.tp * coords.pp;
        rb.chained = has_experts ? int(expert) : -1;
        // DDP turns bucketing off on pp stages > 0 and for model chunks > 0.
        rb.bucket_elems = coords.pp == 0 && chunk == 0 && opts.bucket_elems > 0 ? opts.bucket_elems : 0;
        std::vector<BufferParam> in_order;
        for (const ParamInfo& p : params)
          if (p.chunk == chunk && p.expert == expert && p.dtype == dt)
            in_order.push_back({p.name, p.numel, p.shared_embedding});
        CKPT_ASSIGN_OR_RETURN(rb.layout, LayoutBuffer(in_order, expert ? pc.expert_dp() : pc.dp * pc.cp,
                                                      rb.bucket_elems));
        out.push_back(std::move(rb));
      }
    }
  }
  return out;
}

}  // namespace ckpt::reshard
