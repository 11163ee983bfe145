// HF safetensors (Llama) -> committed ckpt checkpoint, rank by rank and tensor
// by tensor (see convert.h).
#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "ckpt/base/clock.h"
#include "ckpt/base/created_dirs.h"
#include "ckpt/convert/convert.h"
#include "ckpt/convert/hf_llama.h"
#include "ckpt/convert/safetensors.h"
#include "ckpt/format/file_meta_hash.h"
#include "ckpt/protocol/commit.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"

namespace ckpt::convert {
namespace {

using nlohmann::json;
using LinkMap = std::map<std::pair<std::string, int>, std::vector<const TensorLink*>>;

std::string Str(int64_t v) { return std::to_string(v); }

// HF tensors every Llama checkpoint may carry that hold no weights.
bool Ignorable(const std::string& name) { return name.ends_with(".rotary_emb.inv_freq"); }

Result<HfModel> ReadModel(Env* env, const HfImportOptions& o, const SafetensorsDir& dir) {
  const std::string path = JoinPath(o.hf_dir, "config.json");
  CKPT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(env, path, OpenOptions{.follow_links = true}));
  json config = json::parse(text, nullptr, false);
  if (config.is_discarded()) return Status::InvalidArgument("config.json '" + path + "' is not JSON");
  DType hint = DType::kBFloat16;
  if (auto e = dir.Find("model.embed_tokens.weight"); e.ok()) hint = e->entry->dtype;
  CKPT_ASSIGN_OR_RETURN(HfModel m, ParseHfLlamaConfig(config, path, hint));
  m.gpt.stack_layers = o.keys.stack_layers;
  m.gpt.extra_state = o.keys.extra_state;
  m.gpt.make_vocab_size_divisible_by = o.vocab_divisible_by;
  CKPT_RETURN_IF_ERROR(m.gpt.Validate());
  return m;
}

// Every tensor the config implies is present with its shape and dtype; no
// tensor is left unconverted.
Status CheckTensors(const SafetensorsDir& dir, const std::vector<TensorLink>& links, const HfModel& m) {
  std::map<std::string, bool> expected;
  for (const TensorLink& l : links) {
    expected[l.hf_name] = true;
    CKPT_ASSIGN_OR_RETURN(SafetensorsDir::Located at, dir.Find(l.hf_name));
    const SafetensorsEntry& e = *at.entry;
    const reshard::GptConfig& g = m.gpt;
    if (e.shape != l.hf_shape)
      return Status::InvalidArgument(
          "tensor '" + l.hf_name + "' in '" + at.file->path() + "' has shape " + ShapeToString(e.shape) +
          ", but config.json (hidden_size=" + Str(g.hidden) + ", num_attention_heads=" + Str(g.num_heads) +
          ", num_key_value_heads=" + Str(g.query_groups()) + ", head_dim=" + Str(g.head_dim()) +
          ", intermediate_size=" + Str(g.ffn_hidden) + ", vocab_size=" + Str(g.vocab_size) + ") needs " +
          ShapeToString(l.hf_shape));
    if (e.dtype != g.dtype)
      return Status::InvalidArgument("tensor '" + l.hf_name + "' in '" + at.file->path() + "' is " +
                                     std::string(SafetensorsDTypeName(e.dtype)) + ", but config.json says " +
                                     TorchDtypeName(g.dtype) + " (one dtype per model is converted, bit for bit)");
  }
  std::string extra;
  int n = 0;
  for (const std::string& name : dir.TensorNames())
    if (!expected.count(name) && !Ignorable(name) && n++ < 5) extra += (extra.empty() ? "'" : ", '") + name + "'";
  if (n > 0)
    return Status::InvalidArgument(dir.source() + " holds " + Str(n) + " tensor(s) a " + kSupportedArchitecture +
                                   " with this config.json does not have: " + extra +
                                   (m.gpt.tied_embeddings ? " (tie_word_embeddings is true)" : ""));
  return Status::Ok();
}

// Fills the box `t` (a main-replica shard, MCore global coordinates) from the
// HF rows that map into it; rows no HF tensor maps to (vocab padding) stay 0.
Status FillShard(const ShardedTensor& t, bool stacked_layers, const LinkMap& links, const SafetensorsDir& dir,
                 std::span<std::byte> buf) {
  const bool stacked = stacked_layers && t.key.starts_with("decoder.layers.");
  const size_t a = stacked ? 1 : 0;  // row axis
  const int layer = stacked ? int(t.global_offset[0]) : -1;
  auto it = links.find({t.key, layer});
  if (it == links.end()) return Status::Internal("no Hugging Face source for tensor '" + t.key + "'");
  const size_t es = DTypeSize(t.dtype);
  const int64_t row0 = t.global_offset[a], rows = t.local_shape[a];
  const int64_t width = t.global_shape.size() > a + 1 ? t.global_shape[a + 1] : 1;
  const int64_t col0 = t.global_offset.size() > a + 1 ? t.global_offset[a + 1] : 0;
  const int64_t cols = t.local_shape.size() > a + 1 ? t.local_shape[a + 1] : 1;
  for (const TensorLink* l : it->second) {
    CKPT_ASSIGN_OR_RETURN(SafetensorsDir::Located src, dir.Find(l->hf_name));
    for (const RowRun& run : l->runs) {
      const int64_t lo = std::max(row0, run.mcore_row), hi = std::min(row0 + rows, run.mcore_row + run.rows);
      if (lo >= hi) continue;
      auto read = [&](int64_t r, int64_t n) {  // n rows from MCore row r on, columns [col0, col0 + cols)
        const uint64_t from = uint64_t(((run.hf_row + r - run.mcore_row) * width + col0) * int64_t(es));
        return src.file->Read(*src.entry, from, buf.subspan(size_t((r - row0) * cols) * es, size_t(n * cols) * es));
      };
      if (cols == width) {  // whole rows are contiguous in both: one read
        CKPT_RETURN_IF_ERROR(read(lo, hi - lo));
        continue;
      }
      for (int64_t r = lo; r < hi; ++r) CKPT_RETURN_IF_ERROR(read(r, 1));  // a column block per row
    }
  }
  return Status::Ok();
}

// Writes target rank `rank`'s main replicas (tensor by tensor) into its shard file.
Result<Manifest> WriteRank(const HfImportOptions& o, Env* env, const std::string& tmp, int rank,
                           const reshard::GptConfig& g, const LinkMap& links, const SafetensorsDir& dir,
                           ConvertStats* stats) {
  CKPT_ASSIGN_OR_RETURN(RankCoords c, CoordsOf(o.layout, rank));
  CKPT_ASSIGN_OR_RETURN(std::vector<reshard::GptShard> shards, reshard::GptShards(g, o.layout, c));
  std::vector<const reshard::GptShard*> main;
  bool any_object = false;
  for (const auto& s : shards) {
    if (s.tensor.is_main_replica()) main.push_back(&s);
    any_object = any_object || (s.extra_state && s.extra_state->is_main_replica());
  }
  Manifest part;
  if (main.empty() && !any_object) return part;
  const std::string name = ShardFileName(rank);
  CKPT_ASSIGN_OR_RETURN(auto writer, ShardFileWriter::Create(env, JoinPath(tmp, name), rank));
  std::vector<std::byte> buf;
  for (const reshard::GptShard* s : main) {
    buf.assign(size_t(s->tensor.num_bytes()), std::byte{0});
    stats->peak_buffer_bytes = std::max(stats->peak_buffer_bytes, int64_t(buf.size()));
    Status st = FillShard(s->tensor, g.stack_layers, links, dir, buf);
    if (!st.ok()) return st.WithContext("target rank " + Str(rank));
    ShardedTensor meta = s->tensor;
    meta.replica_id.assign(meta.replica_id.size(), 0);
    CKPT_ASSIGN_OR_RETURN(DatasetRecord rec, writer->WriteTensor(meta, buf, o.write));
    part.shards.push_back({std::move(meta), 0, std::move(rec)});
    stats->bytes_written += int64_t(buf.size());
  }
  for (const auto& s : shards)
    if (s.extra_state && s.extra_state->is_main_replica()) {
      CKPT_ASSIGN_OR_RETURN(DatasetRecord rec, writer->WriteObject(*s.extra_state, {}));
      part.objects.push_back({*s.extra_state, 0, 0, std::move(rec)});
    }
  CKPT_RETURN_IF_ERROR(writer->Finish());
  part.files.push_back({name, rank, writer->file_size(), ""});
  CKPT_RETURN_IF_ERROR(RecordMetaHash(env, JoinPath(tmp, name), 0, &part));
  return part;
}

json Metadata(const HfImportOptions& o, const HfModel& m, const SafetensorsDir& dir) {
  return {{"model", reshard::GptModelMetadata(m.gpt, std::string("hf:") + kSupportedArchitecture)},
          {"hf_config", m.config},
          {"converted_from", {{"format", "huggingface-safetensors"}, {"dir", o.hf_dir}, {"source", dir.source()}}}};
}

}  // namespace

Result<ConvertStats> ImportHfLlama(const HfImportOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  Env* env = o.env ? o.env : DefaultEnv();
  CKPT_RETURN_IF_ERROR(o.layout.Validate());
  CKPT_ASSIGN_OR_RETURN(auto dir, SafetensorsDir::Open(env, o.hf_dir));
  CKPT_ASSIGN_OR_RETURN(HfModel m, ReadModel(env, o, *dir));
  std::vector<TensorLink> links = LlamaLinks(m.gpt);
  if (o.links_hook) o.links_hook(&links);
  CKPT_RETURN_IF_ERROR(CheckTensors(*dir, links, m));
  LinkMap by_key;
  for (const TensorLink& l : links) by_key[{l.mcore_key, l.layer}].push_back(&l);
  CKPT_RETURN_IF_ERROR(reshard::GptShards(m.gpt, o.layout, {}).status());  // the layout fits the model
  ConvertStats stats;
  stats.tensors = int64_t(links.size());
  stats.model_bytes = int64_t(dir->total_bytes());
  CKPT_ASSIGN_OR_RETURN(auto to, OpenRoot(env, o.root));  // any URL: written through its backend
  CreatedDirs made(to->env());  // a failed import leaves no root it created
  if (UrlScheme(o.root) == "file") CKPT_RETURN_IF_ERROR(made.Create(to->root()));  // object stores: no dirs
  std::unique_ptr<StagedSave> staged;  // the tmp dir and its lease, held until the commit or the abandon
  std::string tmp;
  auto abandon = [&](const Status& st) {
    if (staged) staged->Abandon().IgnoreError();  // nothing visible yet
    staged.reset();
    made.RemoveIfEmpty();
    return st;
  };
  auto prepared = PrepareSaveDir(to.get(), o.iteration, nullptr, /*allow_older=*/true);  // explicit iteration
  if (!prepared.ok()) return abandon(prepared.status());
  staged = std::move(prepared).value();
  tmp = staged->dir();
  std::vector<Manifest> parts;
  for (int r = 0; r < o.layout.world_size(); ++r) {
    auto part = WriteRank(o, to->env(), tmp, r, m.gpt, by_key, *dir, &stats);
    if (!part.ok()) return abandon(part.status());
    stats.files += int(part->files.size());
    parts.push_back(std::move(part).value());
  }
  auto merged = MergeManifests(parts, o.iteration, reshard::LayoutToJson(o.layout), Metadata(o, m, *dir));
  if (!merged.ok()) return abandon(merged.status());
  bool published = false;
  Status st = PublishCheckpoint(staged.get(), *merged, nullptr, &published);
  if (!st.ok()) return published ? st : abandon(st);
  CKPT_RETURN_IF_ERROR(UpdateTracker(to.get(), o.iteration, nullptr));
  stats.bytes_read = dir->bytes_read();
  stats.seconds = Since(t0);
  return stats;
}

}  // namespace ckpt::convert
