#include "ckpt/format/manifest.h"

#include <cstdio>

#include "ckpt/base/sha256.h"

namespace ckpt {
namespace {

using nlohmann::json;

constexpr std::string_view kHashPrefix = "{\"manifest_sha256\":\"";

json ChunksToJson(const DatasetRecord& r) {
  json chunks = json::array();
  for (const auto& c : r.chunks) chunks.push_back(json::array({c.file_offset, c.stored_size, c.sha256}));
  return chunks;
}

json RecordToJson(const DatasetRecord& r) {
  return {{"dataset", r.dataset},
          {"chunk_elems", r.chunk_elems},
          {"compression", std::string(CompressionName(r.compression))},
          {"shuffle", r.shuffle},
          {"chunks", ChunksToJson(r)}};
}

json ShardToJson(const ManifestShard& s) {
  json j = RecordToJson(s.record);
  j["file"] = s.file;
  j["global_offset"] = s.meta.global_offset;
  j["local_shape"] = s.meta.local_shape;
  j["replica_id"] = s.meta.replica_id;
  if (s.meta.flat_range) j["flat_range"] = {s.meta.flat_range->begin, s.meta.flat_range->end};
  return j;
}

}  // namespace

int64_t Manifest::TotalStoredBytes() const {
  int64_t n = 0;
  for (const auto& f : files) n += int64_t(f.size);
  return n;
}

int64_t Manifest::TotalTensorBytes() const {
  int64_t n = 0;
  for (const auto& s : shards) n += s.meta.num_bytes();
  return n;
}

std::string SerializeManifest(const Manifest& m) {
  json j;
  j["format"] = "ckpt";
  j["format_version"] = m.format_version;
  if (m.chunk_hash != ChunkHash::kSha256) j["chunk_hash"] = std::string(ChunkHashName(m.chunk_hash));
  j["iteration"] = m.iteration;
  j["layout"] = m.layout;
  j["metadata"] = m.metadata;
  json files = json::array();
  for (const auto& f : m.files) {
    json e = {{"name", f.name}, {"rank", f.rank}, {"size", f.size}};
    if (m.format_version >= 2) e["meta_sha256"] = f.meta_sha256;
    files.push_back(std::move(e));
  }
  j["files"] = files;
  json tensors = json::object();
  for (const auto& s : m.shards) {
    json& t = tensors[s.meta.key];
    if (t.is_null()) {
      t["dtype"] = std::string(DTypeName(s.meta.dtype));
      t["global_shape"] = s.meta.global_shape;
      if (s.meta.allow_shape_mismatch) t["allow_shape_mismatch"] = true;
      t["shards"] = json::array();
    }
    t["shards"].push_back(ShardToJson(s));
  }
  j["tensors"] = tensors;
  json objects = json::object();
  for (const auto& o : m.objects) {
    json& t = objects[o.meta.key];
    if (t.is_null()) {
      t["global_shape"] = o.meta.global_shape;
      t["shards"] = json::array();
    }
    json s = RecordToJson(o.record);
    s["file"] = o.file;
    s["global_offset"] = o.meta.global_offset;
    s["size"] = o.size;
    t["shards"].push_back(s);
  }
  j["objects"] = objects;
  std::string compact = j.dump();  // sorted keys: deterministic
  std::string body = compact.substr(1);  // drop the opening brace
  return std::string(kHashPrefix) + Sha256Hex(body) + "\",\n" + body;
}

std::string ShardFileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.h5", rank);
  return buf;
}

}  // namespace ckpt
