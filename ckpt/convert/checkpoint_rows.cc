// Row-block reads of a committed checkpoint's global tensors (see checkpoint_rows.h).
#include "ckpt/convert/checkpoint_rows.h"

#include <cstring>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/commit.h"

namespace ckpt::convert {

Result<std::unique_ptr<CheckpointRows>> CheckpointRows::Open(Env* env, const std::string& root, int64_t iteration,
                                                             bool verify_hashes) {
  std::unique_ptr<CheckpointRows> r(new CheckpointRows());
  CKPT_ASSIGN_OR_RETURN(r->storage_, OpenRoot(env, root));  // any URL: read through its backend
  Storage* storage = r->storage_.get();
  CKPT_ASSIGN_OR_RETURN(r->manifest_, ReadManifest(storage, iteration));
  const Manifest& m = r->manifest_;
  r->reader_ = std::make_unique<ChunkReader>(storage->env(), IterationDir(storage, m.iteration), &m, verify_hashes);
  for (int i = 0; i < int(m.shards.size()); ++i) {
    const ManifestShard& s = m.shards[size_t(i)];
    KeyShards& ks = r->keys_[s.meta.key];
    ks.manifest_shards.push_back(i);
    ks.saved.push_back({s.meta, s.file, s.record.chunk_elems, {}});
    ks.cache.push_back({-1, {}});
  }
  return r;
}

std::vector<std::string> CheckpointRows::TensorKeys() const {
  std::vector<std::string> out;
  for (const auto& [key, ks] : keys_) out.push_back(key);
  return out;
}

Result<const ShardedTensor*> CheckpointRows::Meta(const std::string& key) const {
  auto it = keys_.find(key);
  if (it == keys_.end())
    return Status::NotFound("tensor '" + key + "' is not in checkpoint iteration " + std::to_string(manifest_.iteration));
  return &it->second.saved.front().meta;
}

Result<std::span<const std::byte>> CheckpointRows::Chunk(const std::string& key, KeyShards& ks, int s,
                                                         int64_t chunk) {
  auto& [index, bytes] = ks.cache[size_t(s)];
  if (index != chunk) {
    const ManifestShard& ms = manifest_.shards[size_t(ks.manifest_shards[size_t(s)])];
    CKPT_ASSIGN_OR_RETURN(auto got, reader_->ReadDecoded(ms.file, ms.record, chunk, DTypeSize(ms.meta.dtype),
                                                         "tensor '" + key + "'"));
    bytes.assign(got.begin(), got.end());
    index = chunk;
  }
  return std::span<const std::byte>(bytes);
}

Status CheckpointRows::ReadRows(const std::string& key, int layer, int64_t r0, int64_t r1, std::span<std::byte> dst) {
  CKPT_ASSIGN_OR_RETURN(const ShardedTensor* meta, Meta(key));
  KeyShards& ks = keys_.at(key);
  if (key != last_key_) {  // the cache serves consecutive reads of one key only
    if (auto it = keys_.find(last_key_); it != keys_.end())
      for (auto& c : it->second.cache) c = {-1, {}};
    last_key_ = key;
  }
  const size_t axis = layer >= 0 ? 1 : 0;
  ShardedTensor req;
  req.key = key;
  req.dtype = meta->dtype;
  req.global_shape = meta->global_shape;
  req.allow_shape_mismatch = meta->allow_shape_mismatch;
  req.global_offset = Shape(req.global_shape.size(), 0);
  req.local_shape = req.global_shape;
  const bool scalar = req.global_shape.empty() && layer < 0 && r0 == 0 && r1 == 1;  // one "row"
  if (!scalar && (req.global_shape.size() <= axis || r0 < 0 || r1 > req.global_shape[axis] || r0 > r1))
    return Status::InvalidArgument("tensor '" + key + "' of shape " + ShapeToString(req.global_shape) + ": rows [" +
                                   std::to_string(r0) + ", " + std::to_string(r1) + ") of layer " +
                                   std::to_string(layer) + " are outside it");
  if (layer >= 0) {
    req.global_offset[0] = layer;
    req.local_shape[0] = 1;
  }
  if (!req.global_shape.empty()) {
    req.global_offset[axis] = r0;
    req.local_shape[axis] = r1 - r0;
  }
  const size_t es = DTypeSize(meta->dtype);
  if (dst.size() != size_t(req.num_elements()) * es)
    return Status::Internal("tensor '" + key + "': row buffer of " + std::to_string(dst.size()) + " bytes for " +
                            std::to_string(req.num_elements()) + " elements");
  CKPT_ASSIGN_OR_RETURN(reshard::ReadPlan plan, reshard::PlanReads(ks.saved, {req}));
  for (const reshard::ChunkRead& cr : plan.requests[0].reads) {
    CKPT_ASSIGN_OR_RETURN(std::span<const std::byte> chunk, Chunk(key, ks, cr.saved_shard, cr.chunk));
    for (const reshard::CopyRun& run : cr.runs) {
      if (size_t(run.src + run.len) * es > chunk.size())
        return Status::Corruption("tensor '" + key + "': chunk " + std::to_string(cr.chunk) + " of " +
                                  reader_->FilePath(ks.saved[size_t(cr.saved_shard)].file_index) +
                                  " is shorter than its layout");
      std::memcpy(dst.data() + run.dst * es, chunk.data() + run.src * es, size_t(run.len) * es);
    }
  }
  return Status::Ok();
}

Result<std::vector<std::byte>> CheckpointRows::ReadObject(const ManifestObject& o) {
  std::vector<std::byte> out;
  for (int64_t c = 0; c < int64_t(o.record.chunks.size()); ++c) {
    CKPT_ASSIGN_OR_RETURN(auto bytes, reader_->ReadDecoded(o.file, o.record, c, 1, "object '" + o.meta.key + "'"));
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
  out.resize(o.size);
  return out;
}

int64_t CheckpointRows::cache_bytes() const {
  int64_t n = 0;
  for (const auto& [key, ks] : keys_)
    for (const auto& c : ks.cache) n += int64_t(c.second.size());
  return n;
}

}  // namespace ckpt::convert
