// The tensor keys Megatron-Core registers for ckpt's GPT (dense and MoE, with
// the Transformer Engine and the local layer spec), derived here from
// Megatron-LM's source (HEAD d98e8a64) without GptShards: each spec's modules
// and their state-dict names, then the spec's sharded_state_dict_keys_map as
// TransformerLayer applies it. ckpt's default keys must equal them.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <span>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/workload/job_setup.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_gpt.h"
#include "harness/test_util.h"

namespace ckpt::reshard {
namespace {

enum class Spec { kTe, kLocal };

using KeyMap = std::vector<std::pair<std::string, std::string>>;  // old prefix -> new, in order

// megatron/core/dist_checkpointing/utils.py:189 apply_prefix_mapping: the
// first matching prefix of the map replaces the key's prefix.
std::string ApplyPrefixMapping(const std::string& key, const KeyMap& map) {
  for (const auto& [from, to] : map)
    if (key.rfind(from, 0) == 0) return to + key.substr(from.size());
  return key;
}

// One TransformerLayer's keys (relative to its prefix), before the key map.
std::vector<std::string> LayerModuleKeys(const GptConfig& c, Spec spec) {
  std::vector<std::string> k;
  const bool bias = c.add_bias_linear;
  auto linear = [&](const std::string& module, bool with_bias, bool fused_norm) {
    // TELayerNormColumnParallelLinear's state dict (extensions/transformer_engine.py:1611
    // sharded_state_dict over self.state_dict()): layer_norm_weight (RMSNorm: no
    // layer_norm_bias, registered before the weight), weight, bias.
    if (fused_norm) k.push_back(module + ".layer_norm_weight");
    k.push_back(module + ".weight");
    if (with_bias) k.push_back(module + ".bias");
  };
  const bool te = spec == Spec::kTe;
  // Local spec (models/gpt/gpt_layer_specs.py:439, get_gpt_layer_local_submodules):
  // input_layernorm = a norm module. TE spec (:320-324): input_layernorm left as
  // IdentityOp, linear_qkv = column_parallel_layer_norm_linear (the norm fused).
  if (!te) k.push_back("input_layernorm.weight");
  linear("self_attention.linear_qkv", bias || c.qkv_bias, te);
  linear("self_attention.linear_proj", bias, false);
  // Local (:456): pre_mlp_layernorm = a norm module. TE (:336): a TENorm only
  // with experts, else IdentityOp (the norm goes into linear_fc1, below).
  if (!te || c.num_experts > 0) k.push_back("pre_mlp_layernorm.weight");
  if (c.num_experts == 0) {
    // get_mlp_module_spec_for_backend (:543): TE fuses the norm into linear_fc1.
    linear("mlp.linear_fc1", bias, te);
    linear("mlp.linear_fc2", bias, false);
    return k;
  }
  // MoELayer (transformer/moe/moe_layer.py:260 router, :334 experts):
  // TopKRouter.weight (moe/router.py:64); SequentialMLP re-keys
  // "local_experts.<i>." to "experts." (moe/experts.py:1539-1556) under the
  // MoELayer's child "experts".
  k.push_back("mlp.router.weight");
  for (const char* n : {"linear_fc1", "linear_fc2"}) {
    k.push_back(std::string("mlp.experts.experts.") + n + ".weight");
    if (bias) k.push_back(std::string("mlp.experts.experts.") + n + ".bias");
  }
  return k;
}

// The spec's TransformerLayerSubmodules.sharded_state_dict_keys_map, applied by
// TransformerLayer.sharded_state_dict (transformer/transformer_layer.py:1129-1150).
KeyMap LayerKeyMap(Spec spec) {
  if (spec == Spec::kLocal)  // gpt_layer_specs.py:459-462
    return {{"input_layernorm.", "self_attention.linear_qkv.layer_norm_"},
            {"pre_mlp_layernorm.", "mlp.linear_fc1.layer_norm_"}};
  // gpt_layer_specs.py:339-346: only the TE op-fuser's "mlp.<i>..." names,
  // which this model's modules never produce.
  return {{"mlp.0.weight", "mlp.linear_fc1.layer_norm_weight"},
          {"mlp.0.bias", "mlp.linear_fc1.layer_norm_bias"}};
}

std::set<std::string> McoreKeys(const GptConfig& c, Spec spec) {
  // GPTModel (models/gpt/gpt_model.py:174 embedding, :277 output_layer unless
  // share_embeddings_and_output_weights), TransformerBlock final_layernorm
  // (transformer/transformer_block.py:388); stacked layers drop the layer index
  // (TransformerBlock.sharded_state_dict, non_homogeneous_layers=False).
  std::set<std::string> keys = {"embedding.word_embeddings.weight", "decoder.final_layernorm.weight"};
  if (!c.tied_embeddings) keys.insert("output_layer.weight");
  for (int l = 0; l < c.num_layers; ++l) {
    const std::string prefix = c.stack_layers ? "decoder.layers." : "decoder.layers." + std::to_string(l) + ".";
    for (const std::string& k : LayerModuleKeys(c, spec))
      keys.insert(prefix + ApplyPrefixMapping(k, LayerKeyMap(spec)));
  }
  return keys;
}

std::set<std::string> CkptKeys(const GptConfig& c, const char* layout) {
  const ParallelConfig pc = *ParallelConfig::Parse(layout);
  std::set<std::string> keys;
  for (int r = 0; r < pc.world_size(); ++r) {
    auto shards = GptShards(c, pc, *CoordsOf(pc, r));
    EXPECT_TRUE(shards.ok()) << shards.status().ToString();
    if (shards.ok())
      for (const GptShard& g : *shards) keys.insert(g.tensor.key);
  }
  return keys;
}

GptConfig Model(bool moe, bool stacked, bool bias) {
  GptConfig c = *GptPreset("tiny");
  c.stack_layers = stacked;
  c.add_bias_linear = bias;
  if (moe) {
    c.num_experts = 4;
    c.moe_ffn_hidden = 32;
  }
  return c;
}

// The acceptance check: ckpt's keys with the default norm_keys (TE spec) and
// with norm_keys=local equal the keys MCore registers with that spec.
TEST(McoreKeysTest, DefaultKeysEqualWhatMegatronCoreRegisters) {
  for (bool moe : {false, true})
    for (bool stacked : {false, true})
      for (bool bias : {false, true}) {
        const std::string what = std::string(moe ? "moe" : "dense") + (stacked ? " stacked" : "") + (bias ? " bias" : "");
        GptConfig te = Model(moe, stacked, bias);  // default norm_keys
        EXPECT_EQ(CkptKeys(te, "tp=2,pp=2,dp=2,ep=2"), McoreKeys(te, Spec::kTe)) << what;
        GptConfig local = te;
        local.norm_keys = GptConfig::NormKeys::kLocal;
        EXPECT_EQ(CkptKeys(local, "tp=2,pp=2,dp=2,ep=2"), McoreKeys(local, Spec::kLocal)) << what;
        // The specs agree for a dense model, so its default is both.
        if (!moe) {
          EXPECT_EQ(McoreKeys(te, Spec::kTe), McoreKeys(te, Spec::kLocal)) << what;
        }
      }
  // The tiny model: 8 layers x 6 + 3 keys, the norms under MCore's names.
  const std::set<std::string> tiny = CkptKeys(*GptPreset("tiny"), "tp=1");
  EXPECT_EQ(tiny.size(), 51u);
  EXPECT_TRUE(tiny.count("decoder.layers.7.self_attention.linear_qkv.layer_norm_weight"));
  EXPECT_TRUE(tiny.count("decoder.layers.7.mlp.linear_fc1.layer_norm_weight"));
  // MoE: the TE spec keeps the separate pre-MLP TENorm, the local map renames it.
  EXPECT_TRUE(CkptKeys(Model(true, false, false), "tp=1").count("decoder.layers.0.pre_mlp_layernorm.weight"));
}

// Checkpoints written before record no norm_keys and keep their old names;
// the style round-trips through the "gpt" metadata and bad values are refused.
TEST(McoreKeysTest, LegacyNormKeysForOldMetadata) {
  GptConfig c = *GptPreset("tiny");
  nlohmann::json j = GptConfigToJson(c);
  EXPECT_EQ(j["norm_keys"], "te");
  EXPECT_EQ(GptConfigFromJson(j)->norm_keys, GptConfig::NormKeys::kTe);
  j["norm_keys"] = "local";
  EXPECT_EQ(GptConfigFromJson(j)->norm_keys, GptConfig::NormKeys::kLocal);
  j.erase("norm_keys");  // metadata of a checkpoint written before the option existed
  auto old = GptConfigFromJson(j);
  ASSERT_TRUE(old.ok());
  EXPECT_EQ(old->norm_keys, GptConfig::NormKeys::kLegacy);
  const std::set<std::string> keys = CkptKeys(*old, "tp=2");
  EXPECT_TRUE(keys.count("decoder.layers.0.input_layernorm.weight"));
  EXPECT_TRUE(keys.count("decoder.layers.0.pre_mlp_layernorm.weight"));
  EXPECT_FALSE(keys.count("decoder.layers.0.self_attention.linear_qkv.layer_norm_weight"));
  j["norm_keys"] = "fused";
  auto bad = GptConfigFromJson(j);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("norm_keys='fused'"), std::string::npos) << bad.status().ToString();
}

// The alias on load: a job given a model resumes a checkpoint written before
// (metadata without norm_keys) under its legacy names; a fresh root, a JSON
// model and ":norm_keys=" get MCore's.
TEST(McoreKeysTest, JobsGivenAModelTakeTheSavedCheckpointsNormKeys) {
  const std::string root = testing::ScratchDir("legacy_norm_keys");
  nlohmann::json old_gpt = GptConfigToJson(*GptPreset("tiny"));
  old_gpt.erase("norm_keys");
  std::vector<float> v(4, 1.0f);
  ShardedStateDict sd;
  ShardedTensor w;
  w.key = "w";
  w.dtype = DType::kFloat32;
  w.global_shape = w.local_shape = {4};
  w.global_offset = {0};
  sd.AddTensor(w, std::as_writable_bytes(std::span<float>(v)));
  SaveOptions o;
  o.root = root;
  o.iteration = 5;
  o.metadata = {{"model", "tiny"}, {"gpt", old_gpt}};
  ASSERT_TRUE(SaveCheckpoint(sd, o).ok());
  std::string name;
  using K = GptConfig::NormKeys;
  EXPECT_EQ(workload::ResolveModel("tiny", root, -1, &name)->norm_keys, K::kLegacy);
  EXPECT_EQ(workload::ResolveModel("", root, -1, &name)->norm_keys, K::kLegacy);
  EXPECT_EQ(workload::ResolveModel(GptConfigToJson(*GptPreset("tiny")).dump(), root, -1, &name)->norm_keys,
            K::kTe);  // the JSON names its style
  EXPECT_EQ(workload::ResolveModel(old_gpt.dump(), root, -1, &name)->norm_keys, K::kLegacy);
  EXPECT_EQ(workload::ResolveModel("tiny:norm_keys=te", root, -1, &name)->norm_keys, K::kTe);
  EXPECT_EQ(workload::ResolveModel("tiny", "", -1, &name)->norm_keys, K::kTe);
  EXPECT_EQ(workload::ResolveModel(old_gpt.dump(), "", -1, &name)->norm_keys, K::kTe);
  EXPECT_EQ(workload::ResolveModel("tiny", root + "/none", -1, &name)->norm_keys, K::kTe);
}

}  // namespace
}  // namespace ckpt::reshard
