// Negative controls (see negative_controls.h).
#include "tests/testing/negative_controls.h"

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
