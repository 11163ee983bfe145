// ckpt GPT checkpoint (any layout) -> HF safetensors + config.json (see convert.h).
#include <algorithm>
#include <chrono>
#include <optional>
#include <cstdio>

#include "ckpt/base/clock.h"
#include "ckpt/base/created_dirs.h"
#include "ckpt/convert/checkpoint_rows.h"
#include "ckpt/convert/convert.h"
#include "ckpt/convert/hf_llama.h"
#include "ckpt/convert/safetensors.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"

namespace ckpt::convert {
namespace {

using nlohmann::json;

std::string Str(int64_t v) { return std::to_string(v); }

Result<reshard::GptConfig> SavedGpt(const Manifest& m, const std::string& root) {
  Result<std::optional<reshard::GptConfig>> g = reshard::RecordedGptConfig(m.metadata, "export to HF Llama");
  if (!g.ok()) return g.status().WithContext("checkpoint under '" + root + "'");
  if (!g->has_value())
    return Status::InvalidArgument("checkpoint under '" + root +
                                   "' records no model config in its metadata: its tensors' layout rules are unknown");
  CKPT_RETURN_IF_ERROR(CheckLlamaShaped(**g).WithContext("checkpoint under '" + root + "'"));
  return **g;
}

// Every MCore tensor a link reads exists with the dtype and rows it needs.
Status CheckSources(CheckpointRows& src, const std::vector<TensorLink>& links, const reshard::GptConfig& g) {
  for (const TensorLink& l : links) {
    CKPT_ASSIGN_OR_RETURN(const ShardedTensor* meta, src.Meta(l.mcore_key));
    const size_t axis = l.layer >= 0 ? 1 : 0;
    int64_t rows_needed = 0;
    for (const RowRun& r : l.runs) rows_needed = std::max(rows_needed, r.mcore_row + r.rows);
    const Shape& gs = meta->global_shape;
    const int64_t row_elems = l.hf_shape.size() > 1 ? l.hf_shape[1] : 1;
    const int64_t saved_row_elems = gs.size() > axis + 1 ? gs[axis + 1] : 1;
    if (meta->dtype != g.dtype || gs.size() <= axis || gs[axis] < rows_needed || saved_row_elems != row_elems)
      return Status::InvalidArgument("tensor '" + l.mcore_key + "' in the checkpoint is " +
                                     std::string(DTypeName(meta->dtype)) + " " + ShapeToString(gs) + "; '" +
                                     l.hf_name + "' needs " + std::string(DTypeName(g.dtype)) + " with " +
                                     Str(rows_needed) + " rows of " + Str(row_elems) + " elements");
  }
  return Status::Ok();
}

// HF's order cut into files of at most max_bytes (a larger tensor gets its own file).
std::vector<std::vector<const TensorLink*>> PlanFiles(const std::vector<TensorLink>& links, DType dt,
                                                      int64_t max_bytes) {
  std::vector<std::vector<const TensorLink*>> files(1);
  int64_t in_file = 0;
  for (const TensorLink& l : links) {
    const int64_t bytes = NumElements(l.hf_shape) * int64_t(DTypeSize(dt));
    if (!files.back().empty() && in_file + bytes > max_bytes) {
      files.emplace_back();
      in_file = 0;
    }
    files.back().push_back(&l);
    in_file += bytes;
  }
  return files;
}

std::string FileName(size_t i, size_t n) {
  if (n == 1) return kSafetensorsSingleName;
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

// Copies one HF tensor's rows out of the checkpoint, block by block.
Status CopyLink(CheckpointRows& src, const TensorLink& l, SafetensorsWriter& w, size_t index, DType dt,
                int64_t block_bytes, ConvertStats* stats) {
  const int64_t row_bytes = (l.hf_shape.size() > 1 ? l.hf_shape[1] : 1) * int64_t(DTypeSize(dt));
  const int64_t step = std::max<int64_t>(1, block_bytes / row_bytes);
  std::vector<std::byte> block;
  for (const RowRun& run : l.runs)
    for (int64_t r = 0; r < run.rows; r += step) {
      const int64_t n = std::min(step, run.rows - r);
      block.resize(size_t(n * row_bytes));
      stats->peak_buffer_bytes = std::max(stats->peak_buffer_bytes, int64_t(block.size()) + src.cache_bytes());
      CKPT_RETURN_IF_ERROR(src.ReadRows(l.mcore_key, l.layer, run.mcore_row + r, run.mcore_row + r + n, block));
      CKPT_RETURN_IF_ERROR(w.Write(index, uint64_t((run.hf_row + r) * row_bytes), block));
      stats->bytes_written += int64_t(block.size());
    }
  return Status::Ok();
}

Status WriteConfig(Env* env, const HfExportOptions& o, const Manifest& m, const reshard::GptConfig& g) {
  const json base = m.metadata.value("hf_config", json::object());
  const json config = HfLlamaConfigJson(g, base, o.rms_norm_eps, o.rope_theta);
  return WriteFileAtomic(env, JoinPath(o.out_dir, "config.json"), config.dump(2) + "\n");
}

// The export into o.out_dir; the directories it creates are noted in `made`,
// the files it has written (created or replaced, complete) in `written` - a
// file it failed to write left nothing (the writers remove their tmp files).
Result<ConvertStats> ExportInto(const HfExportOptions& o, Env* env, CreatedDirs* made,
                                std::vector<std::string>* written) {
  const auto t0 = std::chrono::steady_clock::now();
  CKPT_ASSIGN_OR_RETURN(auto src, CheckpointRows::Open(env, o.root, o.iteration));
  const Manifest& m = src->manifest();
  CKPT_ASSIGN_OR_RETURN(reshard::GptConfig g, SavedGpt(m, o.root));
  const std::vector<TensorLink> links = LlamaLinks(g);
  CKPT_RETURN_IF_ERROR(CheckSources(*src, links, g));
  CKPT_RETURN_IF_ERROR(made->Create(o.out_dir));
  const auto files = PlanFiles(links, g.dtype, o.max_shard_bytes);
  ConvertStats stats;
  std::map<std::string, std::string> weight_map;
  for (size_t f = 0; f < files.size(); ++f) {
    std::vector<SafetensorsEntry> entries;
    std::map<std::string, const TensorLink*> by_name;
    for (const TensorLink* l : files[f]) {
      entries.push_back({l->hf_name, g.dtype, l->hf_shape, 0, 0});
      by_name[l->hf_name] = l;
    }
    SortLikeReference(&entries);
    const std::string name = FileName(f, files.size());
    CKPT_ASSIGN_OR_RETURN(auto w, SafetensorsWriter::Create(env, JoinPath(o.out_dir, name), entries, {{"format", "pt"}}));
    for (size_t i = 0; i < w->tensors().size(); ++i) {
      const TensorLink& l = *by_name.at(w->tensors()[i].name);
      CKPT_RETURN_IF_ERROR(CopyLink(*src, l, *w, i, g.dtype, o.block_bytes, &stats));
      weight_map[l.hf_name] = name;
      stats.model_bytes += int64_t(w->tensors()[i].bytes());
    }
    CKPT_RETURN_IF_ERROR(w->Finish());
    written->push_back(JoinPath(o.out_dir, name));
  }
  if (files.size() > 1) {
    const std::string index = JoinPath(o.out_dir, kSafetensorsIndexName);
    CKPT_RETURN_IF_ERROR(WriteSafetensorsIndex(env, index, weight_map, uint64_t(stats.model_bytes)));
    written->push_back(index);
  }
  CKPT_RETURN_IF_ERROR(WriteConfig(env, o, m, g));
  written->push_back(JoinPath(o.out_dir, "config.json"));
  CKPT_RETURN_IF_ERROR(env->SyncDir(o.out_dir));
  stats.tensors = int64_t(links.size());
  stats.files = int(files.size());
  stats.bytes_read = src->bytes_read();
  stats.seconds = Since(t0);
  return stats;
}

}  // namespace

Result<ConvertStats> ExportHfLlama(const HfExportOptions& o) {
  if (o.max_shard_bytes <= 0 || o.block_bytes <= 0)
    return Status::InvalidArgument("HF export: max_shard_bytes (" + Str(o.max_shard_bytes) + ") and block_bytes (" +
                                   Str(o.block_bytes) + ") must be > 0");
  Env* env = o.env ? o.env : DefaultEnv();
  CreatedDirs made(env);
  std::vector<std::string> written;
  auto stats = ExportInto(o, env, &made, &written);
  if (!stats.ok()) {  // leave nothing of a failed export: the files it wrote, the directories it created
    for (const std::string& path : written) env->RemoveFile(path).IgnoreError();
    made.RemoveIfEmpty();
  }
  return stats;
}

}  // namespace ckpt::convert
