// ckpt convert's library (ckpt/convert/convert.h): HF Llama safetensors ->
// ckpt at TP4xPP2 (and other layouts, stacked keys, tied embeddings, VPP) ->
// HF gives every tensor back byte for byte; the fused tensors hold the HF rows
// where MCore expects them (QKV per query group, fc1 = [gate; up]); bad input
// fails naming the file and tensor; MCore's _extra_state objects are written
// with --mcore keys. The function oracle (equal logits) is
// tests/python/convert_oracle.py.
#include "ckpt/convert/convert.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "ckpt/base/created_dirs.h"
#include "ckpt/convert/checkpoint_rows.h"
#include "ckpt/convert/safetensors.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/fingerprint.h"
#include "faults/damage.h"
#include "harness/test_util.h"

namespace ckpt::convert {
namespace {

using nlohmann::json;

// vocab 300 pads differently per TP; 8 heads in 4 groups; head_dim 16 != hidden / heads.
json TinyLlama(bool tied = false) {
  return {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", 64},
          {"intermediate_size", 96}, {"num_attention_heads", 8}, {"num_key_value_heads", 4},
          {"head_dim", 16}, {"num_hidden_layers", 4}, {"vocab_size", 300}, {"tie_word_embeddings", tied},
          {"rms_norm_eps", 1e-6}, {"rope_theta", 500000.0}, {"torch_dtype", "bfloat16"}, {"hidden_act", "silu"}};
}

using Tensors = std::map<std::string, std::vector<std::byte>>;

// Writes a HF model directory: random bits for every tensor the config implies
// (split over `files` safetensors files with an index when files > 1).
Tensors WriteHf(const std::string& dir, const json& config, int files = 1, uint32_t seed = 7) {
  auto m = ParseHfLlamaConfig(config, "test", DType::kBFloat16);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  const auto links = LlamaLinks(m->gpt);
  std::mt19937 rng(seed);
  Tensors data;
  std::map<std::string, std::string> weight_map;
  for (int f = 0; f < files; ++f) {
    std::vector<SafetensorsEntry> entries;
    for (size_t i = f; i < links.size(); i += size_t(files))
      entries.push_back({links[i].hf_name, m->gpt.dtype, links[i].hf_shape, 0, 0});
    const std::string name = files == 1 ? "model.safetensors" : "model-0000" + std::to_string(f + 1) + ".safetensors";
    auto w = SafetensorsWriter::Create(DefaultEnv(), dir + "/" + name, entries, {{"format", "pt"}});
    EXPECT_TRUE(w.ok());
    for (size_t i = 0; i < (*w)->tensors().size(); ++i) {
      std::vector<std::byte> b((*w)->tensors()[i].bytes());
      for (auto& x : b) x = std::byte(rng() & 0xff);  // every bit pattern, NaNs included
      EXPECT_TRUE((*w)->Write(i, 0, b).ok());
      data[(*w)->tensors()[i].name] = b;
      weight_map[(*w)->tensors()[i].name] = name;
    }
    EXPECT_TRUE((*w)->Finish().ok());
  }
  if (files > 1) {
    EXPECT_TRUE(WriteSafetensorsIndex(DefaultEnv(), dir + "/" + kSafetensorsIndexName, weight_map, 0).ok());
  }
  std::ofstream(dir + "/config.json") << config.dump(2);
  return data;
}

Tensors ReadHf(const std::string& dir) {
  auto d = SafetensorsDir::Open(DefaultEnv(), dir);
  EXPECT_TRUE(d.ok()) << d.status().ToString();
  Tensors out;
  for (const std::string& name : (*d)->TensorNames()) {
    auto at = (*d)->Find(name);
    std::vector<std::byte> b(at->entry->bytes());
    EXPECT_TRUE(at->file->Read(*at->entry, 0, b).ok());
    out[name] = std::move(b);
  }
  return out;
}

Result<ConvertStats> Import(const std::string& hf, const std::string& root, const std::string& layout,
                            bool mcore = false) {
  HfImportOptions o;
  o.hf_dir = hf;
  o.root = root;
  CKPT_ASSIGN_OR_RETURN(o.layout, ParallelConfig::Parse(layout));
  o.keys = {mcore, mcore};
  return ImportHfLlama(o);
}

Result<ConvertStats> Export(const std::string& root, const std::string& out, int64_t max_shard = int64_t(1) << 30) {
  HfExportOptions o;
  o.root = root;
  o.out_dir = out;
  o.max_shard_bytes = max_shard;
  o.block_bytes = 1000;  // many small blocks: rows cross chunk and shard boundaries
  return ExportHfLlama(o);
}

void ExpectRoundTrip(const json& config, const std::string& layout, bool mcore, const std::string& name) {
  const std::string hf = testing::ScratchDir(name + "_hf"), root = testing::ScratchDir(name + "_ckpt"),
                    back = testing::ScratchDir(name + "_back");
  const Tensors original = WriteHf(hf, config, 3);
  auto in = Import(hf, root, layout, mcore);
  ASSERT_TRUE(in.ok()) << in.status().ToString();
  auto out = Export(root, back, 40000);  // small files: several shards and an index
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_GT(out->files, 1);
  const Tensors got = ReadHf(back);
  ASSERT_EQ(got.size(), original.size());
  for (const auto& [k, bytes] : original) EXPECT_TRUE(got.at(k) == bytes) << name << ": " << k << " differs";
  std::ifstream cfg(back + "/config.json");
  const json exported = json::parse(cfg);
  for (const char* f : {"hidden_size", "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings",
                        "rms_norm_eps", "rope_theta", "torch_dtype"})
    EXPECT_EQ(exported[f], config[f]) << f;
}

TEST(ConvertTest, HfToTp4Pp2ToHfIsByteIdenticalPerTensor) {
  ExpectRoundTrip(TinyLlama(), "tp=4,pp=2", false, "cv_tp4pp2");
}

TEST(ConvertTest, McoreKeysTiedEmbeddingsAndVppRoundTrip) {
  ExpectRoundTrip(TinyLlama(true), "tp=2,pp=2,vpp=2", true, "cv_mcore_tied_vpp");
  ExpectRoundTrip(TinyLlama(), "tp=1,dp=2", false, "cv_dp2");
}

// The fused tensors hold the HF rows where MCore expects them (an
// independent reading of the rules, not the converter's tables).
TEST(ConvertTest, QkvIsInterleavedPerQueryGroupAndFc1IsGateThenUp) {
  const std::string hf = testing::ScratchDir("cv_rows_hf"), root = testing::ScratchDir("cv_rows_ckpt");
  const Tensors t = WriteHf(hf, TinyLlama());
  ASSERT_TRUE(Import(hf, root, "tp=2").ok());
  auto src = CheckpointRows::Open(DefaultEnv(), root, -1);
  ASSERT_TRUE(src.ok());
  const int64_t row = 64 * 2, hn = 16;  // bytes of one row; head dim
  auto rows = [&](const std::string& key, int64_t r0, int64_t n) {
    std::vector<std::byte> b(size_t(n * row));
    EXPECT_TRUE((*src)->ReadRows(key, -1, r0, r0 + n, b).ok());
    return b;
  };
  auto hf_rows = [&](const std::string& name, int64_t r0, int64_t n) {
    const auto& b = t.at(name);
    return std::vector<std::byte>(b.begin() + r0 * row, b.begin() + (r0 + n) * row);
  };
  const std::string L = "model.layers.1.";
  for (int g = 0; g < 4; ++g) {  // group g: q heads 2g, 2g+1; then k g; then v g
    const int64_t base = g * 4 * hn;
    EXPECT_EQ(rows("decoder.layers.1.self_attention.linear_qkv.weight", base, 2 * hn),
              hf_rows(L + "self_attn.q_proj.weight", 2 * g * hn, 2 * hn));
    EXPECT_EQ(rows("decoder.layers.1.self_attention.linear_qkv.weight", base + 2 * hn, hn),
              hf_rows(L + "self_attn.k_proj.weight", g * hn, hn));
    EXPECT_EQ(rows("decoder.layers.1.self_attention.linear_qkv.weight", base + 3 * hn, hn),
              hf_rows(L + "self_attn.v_proj.weight", g * hn, hn));
  }
  EXPECT_EQ(rows("decoder.layers.1.mlp.linear_fc1.weight", 0, 96), hf_rows(L + "mlp.gate_proj.weight", 0, 96));
  EXPECT_EQ(rows("decoder.layers.1.mlp.linear_fc1.weight", 96, 96), hf_rows(L + "mlp.up_proj.weight", 0, 96));
  auto emb = (*src)->Meta("embedding.word_embeddings.weight");
  ASSERT_TRUE(emb.ok());
  EXPECT_EQ((*emb)->global_shape, (Shape{512, 64}));  // 300 padded to 128 * tp
  EXPECT_EQ(rows("embedding.word_embeddings.weight", 300, 212), std::vector<std::byte>(212 * row));  // zeros
  const json& meta = (*src)->manifest().metadata;
  EXPECT_EQ(meta["model"]["family"], "megatron_gpt");
  EXPECT_EQ(meta["model"]["config"]["num_query_groups"], 4);
  EXPECT_EQ(meta["hf_config"]["rope_theta"], 500000.0);
  EXPECT_EQ((*src)->manifest().layout["tp"], 2);
}

TEST(ConvertTest, McoreOptionsWriteStackedKeysAndExtraStateObjects) {
  const std::string hf = testing::ScratchDir("cv_es_hf"), root = testing::ScratchDir("cv_es_ckpt");
  WriteHf(hf, TinyLlama());
  ASSERT_TRUE(Import(hf, root, "tp=2,pp=2", true).ok());
  auto m = ReadManifest(DefaultEnv(), root, -1);
  ASSERT_TRUE(m.ok());
  std::map<std::string, std::vector<int64_t>> cells;
  for (const auto& o : m->objects) cells[o.meta.key].push_back(o.meta.cell());
  for (const char* k : {"decoder.layers.self_attention.linear_qkv._extra_state",
                        "decoder.layers.self_attention.linear_proj._extra_state",
                        "decoder.layers.mlp.linear_fc1._extra_state", "decoder.layers.mlp.linear_fc2._extra_state"})
    EXPECT_EQ(cells[k], (std::vector<int64_t>{0, 1, 2, 3})) << k;  // one per layer, written once
  EXPECT_EQ(cells.count("output_layer._extra_state"), 0u);  // GPTModel drops it
  bool stacked = false;
  for (const auto& s : m->shards) stacked = stacked || s.meta.key == "decoder.layers.mlp.linear_fc2.weight";
  EXPECT_TRUE(stacked);
  EXPECT_EQ(m->metadata["model"]["config"]["stack_layers"], true);
  EXPECT_EQ(m->metadata["model"]["config"]["extra_state"], true);
}

Status ImportError(const json& config, const std::function<void(const std::string&)>& damage = {},
                   const std::string& layout = "tp=2") {
  static int n = 0;
  const std::string hf = testing::ScratchDir("cv_bad_hf" + std::to_string(n)),
                    root = testing::ScratchDir("cv_bad_ckpt" + std::to_string(n++));
  WriteHf(hf, TinyLlama(), 2);
  std::ofstream(hf + "/config.json") << config.dump();
  if (damage) damage(hf);
  Status st = Import(hf, root, layout).status();
  EXPECT_TRUE(ListIterations(DefaultEnv(), root)->empty());  // nothing committed
  return st;
}

TEST(ConvertTest, BadInputNamesFileAndTensor) {
  json wrong = TinyLlama();
  wrong["num_key_value_heads"] = 2;  // k_proj/v_proj are [64, 64], the config says [32, 64]
  Status st = ImportError(wrong);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("tensor 'model.layers.0.self_attn.k_proj.weight' in '"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find(".safetensors' has shape [64, 64], but config.json"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("needs [32, 64]"), std::string::npos) << st.ToString();

  json mistral = TinyLlama();
  mistral["architectures"] = {"MistralForCausalLM"};
  mistral["model_type"] = "mistral";
  st = ImportError(mistral);
  EXPECT_NE(st.message().find("is not supported; supported: LlamaForCausalLM"), std::string::npos) << st.ToString();

  st = ImportError(TinyLlama(), [](const std::string& hf) { std::remove((hf + "/model-00002.safetensors").c_str()); });
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_NE(st.message().find("model-00002.safetensors', which does not exist"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("maps tensor '"), std::string::npos) << st.ToString();

  st = ImportError(TinyLlama(), [](const std::string& hf) {  // cut the first file inside its header
    std::filesystem::resize_file(hf + "/model-00001.safetensors", 40);
  });
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("model-00001.safetensors': header length"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("truncated header"), std::string::npos) << st.ToString();

  json fp32 = TinyLlama();
  fp32["torch_dtype"] = "float32";  // the files hold bf16
  st = ImportError(fp32);
  EXPECT_NE(st.message().find("is BF16, but config.json says float32"), std::string::npos) << st.ToString();

  st = ImportError(TinyLlama(), {}, "tp=8");  // 4 query groups do not split over 8 ranks
  EXPECT_NE(st.message().find("not divisible by tp=8"), std::string::npos) << st.ToString();
}

TEST(ConvertTest, TorchExportIsAZipTorchLoads) {
  const std::string hf = testing::ScratchDir("cv_torch_hf"), root = testing::ScratchDir("cv_torch_ckpt");
  WriteHf(hf, TinyLlama());
  ASSERT_TRUE(Import(hf, root, "tp=2", true).ok());
  TorchExportOptions o;
  o.root = root;
  o.out_path = root + "/model.pt";
  auto s = ExportTorch(o);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  std::ifstream f(o.out_path, std::ios::binary);
  char magic[4] = {};
  f.read(magic, 4);
  EXPECT_EQ(std::string(magic, 4), std::string("PK\x03\x04", 4));
  EXPECT_EQ(s->tensors, 9);  // embedding, six stacked layer keys, final norm, output layer
}

TEST(ConvertTest, RopeScalingIsRefusedNamingIt) {
  json llama31 = TinyLlama();
  llama31["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"original_max_position_embeddings", 8192}};
  auto m = ParseHfLlamaConfig(llama31, "cfg", DType::kBFloat16);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), Code::kInvalidArgument);
  EXPECT_NE(m.status().message().find("rope_scaling {"), std::string::npos) << m.status().ToString();
  EXPECT_NE(m.status().message().find("llama3"), std::string::npos) << m.status().ToString();
  json linear = TinyLlama();
  linear["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};  // transformers' older field name
  EXPECT_EQ(ParseHfLlamaConfig(linear, "cfg", DType::kBFloat16).status().code(), Code::kInvalidArgument);
  json odd = TinyLlama();
  odd["rope_scaling"] = 2.0;
  EXPECT_EQ(ParseHfLlamaConfig(odd, "cfg", DType::kBFloat16).status().code(), Code::kInvalidArgument);
  for (json plain : {json(nullptr), json{{"rope_type", "default"}}, json{{"type", "default"}}}) {
    json c = TinyLlama();
    c["rope_scaling"] = plain;
    EXPECT_TRUE(ParseHfLlamaConfig(c, "cfg", DType::kBFloat16).ok()) << plain.dump();
  }
}

TEST(CreatedDirsTest, RemovesOnlyWhatItCreatedWhileEmpty) {
  const std::string base = testing::ScratchDir("created_dirs");
  CreatedDirs made(DefaultEnv());
  ASSERT_TRUE(made.Create(base + "/a/b/c/").ok());
  EXPECT_EQ(made.dirs(), (std::vector<std::string>{base + "/a", base + "/a/b", base + "/a/b/c"}));
  made.RemoveIfEmpty();
  EXPECT_FALSE(std::filesystem::exists(base + "/a"));
  EXPECT_TRUE(std::filesystem::exists(base));  // it existed before
  ASSERT_TRUE(made.Create(base + "/x/y").ok());
  std::ofstream(base + "/x/keep") << "someone else's";
  made.RemoveIfEmpty();  // y is empty and goes; x holds a file it did not write and stays
  EXPECT_FALSE(std::filesystem::exists(base + "/x/y"));
  EXPECT_TRUE(std::filesystem::exists(base + "/x/keep"));
}

// A damaged checkpoint fails the exports with kCorruption, and they leave
// nothing they created: no destination directory, no file in one that existed.
TEST(ConvertTest, FailedExportsLeaveNothingTheyCreated) {
  const std::string hf = testing::ScratchDir("cv_fail_hf"), root = testing::ScratchDir("cv_fail_ckpt"),
                    out = testing::ScratchDir("cv_fail_out");
  WriteHf(hf, TinyLlama());
  ASSERT_TRUE(Import(hf, root, "tp=1").ok());
  auto d = faults::ApplyDamage(DefaultEnv(), root, -1, {faults::Action::kBitFlip, "rank_00000.h5", "first", 1});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  auto hf_out = Export(root, out + "/new/hf", 40000);  // several files: some are complete before the damage
  EXPECT_EQ(hf_out.status().code(), Code::kCorruption) << hf_out.status().ToString();
  EXPECT_FALSE(std::filesystem::exists(out + "/new"));
  std::ofstream(out + "/notes.txt") << "mine";
  hf_out = Export(root, out, 40000);
  EXPECT_EQ(hf_out.status().code(), Code::kCorruption) << hf_out.status().ToString();
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(out), {}), 1);  // notes.txt alone
  TorchExportOptions o;
  o.root = root;
  o.out_path = out + "/new/model.pt";
  EXPECT_EQ(ExportTorch(o).status().code(), Code::kCorruption);
  EXPECT_FALSE(std::filesystem::exists(out + "/new"));
  EXPECT_EQ(Export(root, out + "/zero", 0).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Export(root, out + "/zero", -1).status().code(), Code::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(out + "/zero"));
}

}  // namespace
}  // namespace ckpt::convert
