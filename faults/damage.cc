#include "faults/damage.h"

#include <algorithm>
#include <vector>

#include "ckpt/protocol/checkpoint.h"

namespace ckpt::faults {
namespace {

struct ChunkRef {
  uint64_t offset = 0, size = 0;
  std::string tensor, dataset;
  int64_t index = 0;
};

// Every stored chunk of manifest file `f`, in file order.
std::vector<ChunkRef> ChunksOf(const Manifest& m, int f) {
  std::vector<ChunkRef> out;
  auto add = [&](const DatasetRecord& rec, const std::string& key) {
    for (size_t c = 0; c < rec.chunks.size(); ++c)
      if (rec.chunks[c].stored_size > 0)
        out.push_back({rec.chunks[c].file_offset, rec.chunks[c].stored_size, key, rec.dataset, int64_t(c)});
  };
  for (const auto& s : m.shards)
    if (s.file == f) add(s.record, s.meta.key);
  for (const auto& o : m.objects)
    if (o.file == f) add(o.record, o.meta.key);
  std::sort(out.begin(), out.end(), [](const ChunkRef& a, const ChunkRef& b) { return a.offset < b.offset; });
  return out;
}

Status FlipBit(Env* env, const std::string& path, uint64_t offset, int bit) {
  CKPT_ASSIGN_OR_RETURN(auto f, env->OpenFile(path, OpenMode::kReadWrite));
  std::byte b{0};
  CKPT_ASSIGN_OR_RETURN(size_t n, f->PRead(offset, std::span(&b, 1)));
  if (n != 1) return Status::InvalidArgument("bit flip at " + std::to_string(offset) + " is past the end of '" + path + "'");
  b ^= std::byte(1u << bit);
  CKPT_RETURN_IF_ERROR(f->PWrite(offset, std::span<const std::byte>(&b, 1)));
  CKPT_RETURN_IF_ERROR(f->Sync());
  return f->Close();
}

Status Cut(Env* env, const std::string& path, uint64_t size) {
  CKPT_ASSIGN_OR_RETURN(auto f, env->OpenFile(path, OpenMode::kReadWrite));
  CKPT_RETURN_IF_ERROR(f->Truncate(size));
  CKPT_RETURN_IF_ERROR(f->Sync());
  return f->Close();
}

Result<DamageResult> DamageManifest(Env* env, const std::string& dir, const DamageRequest& req) {
  DamageResult r;
  r.path = JoinPath(dir, kManifestName);
  CKPT_ASSIGN_OR_RETURN(FileInfo info, env->Stat(r.path));
  if (!info.exists) return Status::NotFound("no manifest '" + r.path + "' to damage");
  if (req.kind == Action::kDelete) {
    CKPT_RETURN_IF_ERROR(env->RemoveFile(r.path));
    return r;
  }
  r.offset = req.chunk == "first" ? 0 : req.chunk == "last" ? info.size - 1 : info.size / 2;
  if (req.kind == Action::kTruncate) {
    CKPT_RETURN_IF_ERROR(Cut(env, r.path, r.offset));
    return r;
  }
  CKPT_RETURN_IF_ERROR(FlipBit(env, r.path, r.offset, int(req.seed % 8)));
  return r;
}

}  // namespace

std::string DamageResult::ToString() const {
  std::string s = "file '" + path + "'";
  if (!tensor.empty()) s += ", tensor '" + tensor + "', dataset '" + dataset + "', chunk " + std::to_string(chunk);
  return s + ", byte " + std::to_string(offset);
}

Result<DamageResult> ApplyDamage(Env* env, const std::string& root, int64_t iteration, const DamageRequest& req) {
  if (!IsDamage(req.kind)) return Status::InvalidArgument("not a damage action: " + std::string(ActionName(req.kind)));
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(env, root, iteration));
  const std::string dir = JoinPath(root, IterDirName(m.iteration));
  if (req.file == "manifest") return DamageManifest(env, dir, req);
  int f = -1;
  for (int i = 0; i < int(m.files.size()); ++i)
    if (m.files[i].name == req.file) f = i;
  if (f < 0) return Status::NotFound("iteration " + std::to_string(m.iteration) + " has no shard file '" + req.file + "'");
  std::vector<ChunkRef> chunks = ChunksOf(m, f);
  if (chunks.empty()) return Status::NotFound("shard file '" + req.file + "' holds no stored chunk");
  const ChunkRef& c = req.chunk == "first" ? chunks.front() : req.chunk == "last" ? chunks.back() : chunks[chunks.size() / 2];
  DamageResult r{JoinPath(dir, req.file), c.tensor, c.dataset, c.index, 0};
  switch (req.kind) {
    case Action::kDelete:
      CKPT_RETURN_IF_ERROR(env->RemoveFile(r.path));
      break;
    case Action::kTruncate:
      r.offset = c.offset + c.size / 2;  // inside the chosen chunk: it and all later bytes are lost
      CKPT_RETURN_IF_ERROR(Cut(env, r.path, r.offset));
      break;
    default:
      r.offset = c.offset + (req.seed / 8) % c.size;
      CKPT_RETURN_IF_ERROR(FlipBit(env, r.path, r.offset, int(req.seed % 8)));
      break;
  }
  return r;
}

}  // namespace ckpt::faults
