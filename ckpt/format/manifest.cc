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

// Thrown-free field access: nlohmann throws on type errors, so parsing runs in
// one try block and converts any exception into kCorruption naming the field.
Status ParseRecord(const json& j, DatasetRecord* r) {
  r->dataset = j.at("dataset").get<std::string>();
  r->chunk_elems = j.at("chunk_elems").get<int64_t>();
  CKPT_ASSIGN_OR_RETURN(r->compression, ParseCompression(j.at("compression").get<std::string>()));
  r->shuffle = j.at("shuffle").get<bool>();
  for (const auto& c : j.at("chunks")) {
    if (!c.is_array() || c.size() != 3) return Status::Corruption("chunk entry is not [offset, size, sha256]");
    r->chunks.push_back({c[0].get<uint64_t>(), c[1].get<uint64_t>(), c[2].get<std::string>()});
  }
  return Status::Ok();
}

Status ParseBody(const json& j, Manifest* m) {
  if (j.at("format").get<std::string>() != "ckpt") return Status::Corruption("not a ckpt manifest");
  m->format_version = j.at("format_version").get<int>();
  if (m->format_version != kFormatVersion)
    return Status::FailedPrecondition("unsupported format_version " + std::to_string(m->format_version));
  m->iteration = j.at("iteration").get<int64_t>();
  m->layout = j.at("layout");
  m->metadata = j.at("metadata");
  for (const auto& f : j.at("files"))
    m->files.push_back({f.at("name").get<std::string>(), f.at("rank").get<int>(), f.at("size").get<uint64_t>()});
  for (const auto& [key, t] : j.at("tensors").items()) {
    CKPT_ASSIGN_OR_RETURN(DType dtype, ParseDType(t.at("dtype").get<std::string>()));
    for (const auto& s : t.at("shards")) {
      ManifestShard shard;
      shard.meta.key = key;
      shard.meta.dtype = dtype;
      shard.meta.global_shape = t.at("global_shape").get<Shape>();
      shard.meta.allow_shape_mismatch = t.value("allow_shape_mismatch", false);
      shard.meta.global_offset = s.at("global_offset").get<Shape>();
      shard.meta.local_shape = s.at("local_shape").get<Shape>();
      shard.meta.replica_id = s.at("replica_id").get<ReplicaId>();
      if (s.contains("flat_range"))
        shard.meta.flat_range = FlatRange{s["flat_range"].at(0).get<int64_t>(), s["flat_range"].at(1).get<int64_t>()};
      shard.file = s.at("file").get<int>();
      CKPT_RETURN_IF_ERROR(ParseRecord(s, &shard.record));
      CKPT_RETURN_IF_ERROR(shard.meta.Validate());
      if (shard.file < 0 || size_t(shard.file) >= m->files.size())
        return Status::Corruption("tensor '" + key + "' names file index " + std::to_string(shard.file));
      m->shards.push_back(std::move(shard));
    }
  }
  for (const auto& [key, o] : j.at("objects").items()) {
    for (const auto& s : o.at("shards")) {
      ManifestObject obj;
      obj.meta.key = key;
      obj.meta.global_shape = o.at("global_shape").get<Shape>();
      obj.meta.global_offset = s.at("global_offset").get<Shape>();
      obj.file = s.at("file").get<int>();
      obj.size = s.at("size").get<uint64_t>();
      CKPT_RETURN_IF_ERROR(ParseRecord(s, &obj.record));
      if (obj.file < 0 || size_t(obj.file) >= m->files.size())
        return Status::Corruption("object '" + key + "' names file index " + std::to_string(obj.file));
      m->objects.push_back(std::move(obj));
    }
  }
  return Status::Ok();
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
  j["iteration"] = m.iteration;
  j["layout"] = m.layout;
  j["metadata"] = m.metadata;
  json files = json::array();
  for (const auto& f : m.files) files.push_back({{"name", f.name}, {"rank", f.rank}, {"size", f.size}});
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

Result<Manifest> ParseManifest(std::string_view bytes, const std::string& path) {
  auto corrupt = [&](const std::string& why) { return Status::Corruption("manifest '" + path + "': " + why); };
  size_t nl = bytes.find('\n');
  if (bytes.substr(0, kHashPrefix.size()) != kHashPrefix || nl == std::string_view::npos ||
      nl != kHashPrefix.size() + 64 + 2)
    return corrupt("missing or malformed self-hash line (incomplete or not a ckpt manifest)");
  std::string_view recorded = bytes.substr(kHashPrefix.size(), 64);
  std::string_view body = bytes.substr(nl + 1);
  std::string actual = Sha256Hex(body);
  if (recorded != actual)
    return corrupt("self-hash mismatch (recorded " + std::string(recorded) + ", actual " + actual +
                   "): torn or modified manifest");
  Manifest m;
  try {
    json j = json::parse("{" + std::string(body));
    Status st = ParseBody(j, &m);
    if (!st.ok()) return corrupt(st.message());
  } catch (const std::exception& e) {
    return corrupt(std::string("invalid content: ") + e.what());
  }
  return m;
}

std::string IterDirName(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

std::string TmpIterDirName(int64_t iteration, const std::string& nonce) {
  return "." + IterDirName(iteration) + ".tmp-" + nonce;
}

Result<int64_t> ParseIterDirName(std::string_view name) {
  constexpr std::string_view kPrefix = "iter_";
  if (name.substr(0, kPrefix.size()) != kPrefix || name.size() == kPrefix.size())
    return Status::InvalidArgument("not an iteration directory: " + std::string(name));
  int64_t v = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return Status::InvalidArgument("not an iteration directory: " + std::string(name));
    v = v * 10 + (c - '0');
  }
  return v;
}

bool IsTmpIterDirName(std::string_view name) {
  return name.substr(0, 6) == ".iter_" && name.find(".tmp-") != std::string_view::npos;
}

std::string ShardFileName(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "rank_%05d.h5", rank);
  return buf;
}

}  // namespace ckpt
