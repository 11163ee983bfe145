// ckpt checkpoint -> one consolidated torch.save file (see convert.h).
#include <algorithm>
#include <chrono>
#include <optional>
#include <map>
#include <vector>

#include "ckpt/base/clock.h"
#include "ckpt/base/created_dirs.h"
#include "ckpt/convert/checkpoint_rows.h"
#include "ckpt/convert/convert.h"
#include "ckpt/convert/torch_save.h"
#include "reshard/family.h"

namespace ckpt::convert {
namespace {

bool ValidUtf8(const std::vector<std::byte>& b) {
  size_t i = 0;
  while (i < b.size()) {
    const unsigned c = unsigned(b[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > b.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((unsigned(b[i + k]) >> 6) != 0x2) return false;
    i += n;
  }
  return true;
}

// Rows of `meta` to export: the rows the recorded model family calls
// canonical (a padded vocabulary's unpadded rows) when padding is stripped.
int64_t ExportRows(const ShardedTensor& meta, const Manifest& m, bool keep_padding) {
  if (meta.global_shape.empty()) return 1;
  const int64_t saved = meta.global_shape[0];
  if (keep_padding || !meta.allow_shape_mismatch) return saved;
  Result<std::optional<reshard::ModelRef>> model = reshard::ModelOf(m.metadata);
  if (!model.ok() || !model->has_value()) return saved;
  const int64_t rows = (*model)->family->CanonicalRows((*model)->config, meta);
  return rows < 0 ? saved : std::min(saved, rows);
}

// Adds the one-cell objects; blobs that are not UTF-8 text go into *blobs, to
// be written as uint8 tensors after the checkpoint's (weights_only allows no
// bytes objects).
Status AddObjects(CheckpointRows& src, TorchSaveWriter& w, ConvertStats* stats,
                  std::vector<std::vector<std::byte>>* blobs) {
  std::map<std::string, std::vector<const ManifestObject*>> by_key;
  for (const ManifestObject& o : src.manifest().objects) by_key[o.meta.key].push_back(&o);
  for (const auto& [key, cells] : by_key) {
    if (key.ends_with("._extra_state")) {  // MCore's local linears: get_extra_state() is None
      w.AddNone(key);
      continue;
    }
    if (NumElements(cells.front()->meta.global_shape) != 1) {  // per-rank state: bound to the saved layout
      ++stats->objects_skipped;
      continue;
    }
    CKPT_ASSIGN_OR_RETURN(std::vector<std::byte> blob, src.ReadObject(*cells.front()));
    if (ValidUtf8(blob)) w.AddString(key, std::string(reinterpret_cast<const char*>(blob.data()), blob.size()));
    else {
      w.AddTensor(key, DType::kUInt8, {int64_t(blob.size())});
      blobs->push_back(std::move(blob));
    }
  }
  return Status::Ok();
}

// The export into o.out_path; the directories it creates are noted in `made`
// (a failed TorchSaveWriter removes its own tmp file).
Result<ConvertStats> ExportInto(const TorchExportOptions& o, Env* env, CreatedDirs* made) {
  const auto t0 = std::chrono::steady_clock::now();
  CKPT_ASSIGN_OR_RETURN(auto src, CheckpointRows::Open(env, o.root, o.iteration));
  CKPT_RETURN_IF_ERROR(made->Create(DirName(o.out_path)));
  CKPT_ASSIGN_OR_RETURN(auto w, TorchSaveWriter::Create(env, o.out_path));
  ConvertStats stats;
  struct Planned {
    std::string key;
    const ShardedTensor* meta;
    int64_t rows;
  };
  std::vector<Planned> plan;
  for (const std::string& key : src->TensorKeys()) {
    CKPT_ASSIGN_OR_RETURN(const ShardedTensor* meta, src->Meta(key));
    Shape shape = meta->global_shape;
    const int64_t rows = ExportRows(*meta, src->manifest(), o.keep_vocab_padding);
    if (!shape.empty()) shape[0] = rows;
    w->AddTensor(key, meta->dtype, shape);
    plan.push_back({key, meta, rows});
  }
  std::vector<std::vector<std::byte>> blobs;  // tensors plan.size(), plan.size() + 1, ...
  CKPT_RETURN_IF_ERROR(AddObjects(*src, *w, &stats, &blobs));
  CKPT_RETURN_IF_ERROR(w->Start());
  std::vector<std::byte> block;
  for (size_t i = 0; i < plan.size(); ++i) {
    const Shape& gs = plan[i].meta->global_shape;
    const int64_t row_bytes = (gs.empty() ? 1 : NumElements(Shape(gs.begin() + 1, gs.end()))) *
                              int64_t(DTypeSize(plan[i].meta->dtype));
    const int64_t step = std::max<int64_t>(1, o.block_bytes / std::max<int64_t>(row_bytes, 1));
    CKPT_RETURN_IF_ERROR(w->BeginTensor(i));
    for (int64_t r = 0; r < plan[i].rows; r += step) {
      const int64_t n = std::min(step, plan[i].rows - r);
      block.resize(size_t(n * row_bytes));
      CKPT_RETURN_IF_ERROR(src->ReadRows(plan[i].key, -1, r, r + n, block));
      CKPT_RETURN_IF_ERROR(w->Append(block));
      stats.bytes_written += int64_t(block.size());
      stats.peak_buffer_bytes = std::max(stats.peak_buffer_bytes, int64_t(block.size()) + src->cache_bytes());
    }
    CKPT_RETURN_IF_ERROR(w->EndTensor());
  }
  for (size_t j = 0; j < blobs.size(); ++j) {
    CKPT_RETURN_IF_ERROR(w->BeginTensor(plan.size() + j));
    CKPT_RETURN_IF_ERROR(w->Append(blobs[j]));
    CKPT_RETURN_IF_ERROR(w->EndTensor());
  }
  CKPT_RETURN_IF_ERROR(w->Finish());
  CKPT_RETURN_IF_ERROR(env->SyncDir(DirName(o.out_path)));
  stats.tensors = int64_t(plan.size());
  stats.files = 1;
  stats.model_bytes = stats.bytes_written;
  stats.bytes_read = src->bytes_read();
  stats.seconds = Since(t0);
  return stats;
}

}  // namespace

Result<ConvertStats> ExportTorch(const TorchExportOptions& o) {
  Env* env = o.env ? o.env : DefaultEnv();
  CreatedDirs made(env);
  auto stats = ExportInto(o, env, &made);
  if (!stats.ok()) made.RemoveIfEmpty();  // a failed export leaves no directory it created
  return stats;
}

}  // namespace ckpt::convert
