// Negative controls (see negative_controls.h).
#include "harness/negative_controls.h"

#include <string>
#include <string_view>

namespace ckpt::testing {
namespace {

bool IsDenseFc1(const reshard::GptShard& g) {
  const std::string_view key = g.tensor.key;
  if (key.find(".mlp.experts.") != std::string_view::npos) return false;
  return key.ends_with(".mlp.linear_fc1.weight") || key.ends_with(".mlp.linear_fc1.bias");
}

// The W_r shard `w` (first of its pair) widened to the whole local [W_r; V_r]
// parameter at row block r of tp: offset 2 * W_r's, local rows doubled.
reshard::GptShard NaiveOf(const reshard::GptShard& w) {
  reshard::GptShard g = w;
  const size_t axis = g.tensor.global_shape.size() - (g.tensor.key.ends_with(".bias") ? 1 : 2);
  g.tensor.global_offset[axis] *= 2;
  g.tensor.local_shape[axis] *= 2;
  g.param_offset = 0;
  return g;
}

}  // namespace

Result<std::vector<reshard::GptShard>> NaiveFc1Shards(const reshard::GptConfig& cfg,
                                                      const ParallelConfig& pc,
                                                      const RankCoords& coords) {
  if (!cfg.swiglu) return Status::InvalidArgument("NaiveFc1Shards needs a SwiGLU config");
  CKPT_ASSIGN_OR_RETURN(std::vector<reshard::GptShard> truth, reshard::GptShards(cfg, pc, coords));
  std::vector<reshard::GptShard> out;
  out.reserve(truth.size());
  for (size_t i = 0; i < truth.size(); ++i) {
    if (!IsDenseFc1(truth[i])) {
      out.push_back(truth[i]);
      continue;
    }
    // GptShards emits W_r then V_r of one parameter back to back.
    if (i + 1 >= truth.size() || truth[i + 1].param != truth[i].param)
      return Status::Internal("fc1 parameter '" + truth[i].param + "' has no V_r shard after W_r");
    out.push_back(NaiveOf(truth[i]));
    ++i;
  }
  return out;
}

namespace {

// "decoder.layers.<g>.<rest>" -> g, or -1 for any other key.
int LayerOf(std::string_view key) {
  constexpr std::string_view kPrefix = "decoder.layers.";
  if (!key.starts_with(kPrefix)) return -1;
  key.remove_prefix(kPrefix.size());
  const size_t dot = key.find('.');
  if (dot == 0 || dot == std::string_view::npos) return -1;
  int g = 0;
  for (char ch : key.substr(0, dot)) {
    if (ch < '0' || ch > '9') return -1;
    g = g * 10 + (ch - '0');
  }
  return g;
}

std::string Renumbered(const std::string& key, int from, int to) {
  const std::string old = "decoder.layers." + std::to_string(from) + ".";
  return "decoder.layers." + std::to_string(to) + "." + key.substr(old.size());
}

}  // namespace

Result<std::vector<reshard::GptShard>> ContiguousLayerKeys(const reshard::GptConfig& cfg,
                                                           const ParallelConfig& pc,
                                                           const RankCoords& coords,
                                                           std::vector<reshard::GptShard> shards) {
  if (pc.vpp == 1) return shards;
  if (cfg.stack_layers) return Status::InvalidArgument("ContiguousLayerKeys needs per-layer keys (stack_layers off)");
  int before = 0;  // layers of the stages before this one
  for (int p = 0; p < coords.pp; ++p) {
    CKPT_ASSIGN_OR_RETURN(auto spans, reshard::StageLayerSpans(cfg, pc, p));
    for (const auto& s : spans) before += s.count;
  }
  CKPT_ASSIGN_OR_RETURN(auto spans, reshard::StageLayerSpans(cfg, pc, coords.pp));
  auto naive = [&](int g) {
    for (int v = 0; v < int(spans.size()); ++v)
      if (g >= spans[v].first && g < spans[v].first + spans[v].count)
        return before + v * spans[v].count + (g - spans[v].first);
    return g;
  };
  for (auto& s : shards) {
    const int g = LayerOf(s.tensor.key);
    if (g < 0) continue;
    s.tensor.key = Renumbered(s.tensor.key, g, naive(g));
    if (s.extra_state && LayerOf(s.extra_state->key) == g) s.extra_state->key = Renumbered(s.extra_state->key, g, naive(g));
  }
  return shards;
}

LinksHook ConvertNegativeControl(std::string_view name) {
  if (name == "naive-qkv")
    return [](std::vector<convert::TensorLink>* links) {
      int64_t q_rows = 0;  // HF order per layer: q_proj, k_proj, v_proj
      for (auto& l : *links) {
        const int64_t rows = l.hf_shape[0];
        if (l.hf_name.ends_with("self_attn.q_proj.weight")) {
          q_rows = rows;
          l.runs = {{0, 0, rows}};
        }
        if (l.hf_name.ends_with("self_attn.k_proj.weight")) l.runs = {{0, q_rows, rows}};
        if (l.hf_name.ends_with("self_attn.v_proj.weight")) l.runs = {{0, q_rows + rows, rows}};
      }
    };
  if (name == "swap-gate-up")
    return [](std::vector<convert::TensorLink>* links) {
      for (auto& l : *links) {
        const int64_t f = l.hf_shape[0];
        if (l.hf_name.ends_with("mlp.gate_proj.weight")) l.runs = {{0, f, f}};
        if (l.hf_name.ends_with("mlp.up_proj.weight")) l.runs = {{0, 0, f}};
      }
    };
  return {};
}

}  // namespace ckpt::testing
