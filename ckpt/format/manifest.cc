#include "ckpt/format/manifest.h"

#include <cstdio>
#include <stdexcept>

#include "ckpt/base/sha256.h"
#include "ckpt/format/manifest_check.h"

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

// Field access for untrusted JSON: every getter checks the type and range and
// throws FieldError naming the field's path ("tensors['w'].shards[0].file");
// ParseManifest converts it (and any nlohmann exception) into kCorruption.
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::string Sub(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }
std::string Idx(const std::string& path, size_t i) { return path + "[" + std::to_string(i) + "]"; }

[[noreturn]] void Bad(const std::string& path, const std::string& why) { throw FieldError(path + ": " + why); }

const json& At(const json& j, const std::string& key, const std::string& path) {
  if (!j.is_object()) Bad(path, "must be an object");
  auto it = j.find(key);
  if (it == j.end()) Bad(Sub(path, key), "missing");
  return *it;
}

const json& Kind(const json& v, json::value_t kind, const std::string& path) {
  const bool ok = kind == json::value_t::number_integer ? v.is_number_integer() : v.type() == kind;
  if (!ok) Bad(path, std::string("must be ") + (kind == json::value_t::object ? "an object" :
                                               kind == json::value_t::array ? "an array" :
                                               kind == json::value_t::string ? "a string" :
                                               kind == json::value_t::boolean ? "a boolean" : "an integer") +
                       ", not " + v.type_name());
  return v;
}

int64_t Int(const json& v, const std::string& path, int64_t lo, int64_t hi) {
  Kind(v, json::value_t::number_integer, path);
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) Bad(path, v.dump() + " is out of range");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    Bad(path, std::to_string(x) + " is out of range [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return x;
}

int64_t IntAt(const json& j, const std::string& key, const std::string& path, int64_t lo, int64_t hi) {
  return Int(At(j, key, path), Sub(path, key), lo, hi);
}

std::string StrAt(const json& j, const std::string& key, const std::string& path) {
  return Kind(At(j, key, path), json::value_t::string, Sub(path, key)).get<std::string>();
}

Shape ShapeAt(const json& j, const std::string& key, const std::string& path) {
  const std::string p = Sub(path, key);
  const json& a = Kind(At(j, key, path), json::value_t::array, p);
  if (a.size() > size_t(kMaxManifestDims)) Bad(p, std::to_string(a.size()) + " dimensions (at most " +
                                                    std::to_string(kMaxManifestDims) + ")");
  Shape s;
  for (size_t i = 0; i < a.size(); ++i) s.push_back(Int(a[i], Idx(p, i), INT64_MIN, INT64_MAX));
  return s;
}

void ParseRecord(const json& j, const std::string& path, DatasetRecord* r) {
  r->dataset = StrAt(j, "dataset", path);
  r->chunk_elems = IntAt(j, "chunk_elems", path, INT64_MIN, INT64_MAX);
  auto comp = ParseCompression(StrAt(j, "compression", path));
  if (!comp.ok()) Bad(Sub(path, "compression"), comp.status().message());
  r->compression = *comp;
  r->shuffle = Kind(At(j, "shuffle", path), json::value_t::boolean, Sub(path, "shuffle")).get<bool>();
  const std::string cp = Sub(path, "chunks");
  const json& chunks = Kind(At(j, "chunks", path), json::value_t::array, cp);
  r->chunks.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const json& c = chunks[i];
    const std::string p = Idx(cp, i);
    if (!c.is_array() || c.size() != 3) Bad(p, "chunk entry is not [file_offset, stored_size, digest]");
    r->chunks.push_back({uint64_t(Int(c[0], p + ".file_offset", 0, INT64_MAX)),
                         uint64_t(Int(c[1], p + ".stored_size", 0, INT64_MAX)),
                         Kind(c[2], json::value_t::string, p + ".sha256").get<std::string>()});
  }
}

void ParseFiles(const json& j, Manifest* m) {
  const json& files = Kind(At(j, "files", ""), json::value_t::array, "files");
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string p = Idx("files", i);
    m->files.push_back({StrAt(files[i], "name", p), int(IntAt(files[i], "rank", p, 0, INT32_MAX)),
                        uint64_t(IntAt(files[i], "size", p, 0, INT64_MAX)),
                        m->format_version >= 2 ? StrAt(files[i], "meta_sha256", p) : std::string()});
  }
}

int FileIndex(const json& s, const std::string& path, const Manifest& m) {
  return int(IntAt(s, "file", path, 0, int64_t(m.files.size()) - 1));
}

void ParseTensors(const json& j, Manifest* m) {
  for (const auto& [key, t] : Kind(At(j, "tensors", ""), json::value_t::object, "tensors").items()) {
    const std::string tp = "tensors['" + key + "']";
    auto dtype = ParseDType(StrAt(t, "dtype", tp));
    if (!dtype.ok()) Bad(Sub(tp, "dtype"), dtype.status().message());
    const Shape global = ShapeAt(t, "global_shape", tp);
    bool mismatch = false;
    if (t.contains("allow_shape_mismatch"))
      mismatch = Kind(t["allow_shape_mismatch"], json::value_t::boolean, Sub(tp, "allow_shape_mismatch")).get<bool>();
    const json& shards = Kind(At(t, "shards", tp), json::value_t::array, Sub(tp, "shards"));
    for (size_t i = 0; i < shards.size(); ++i) {
      const json& s = shards[i];
      const std::string sp = Idx(Sub(tp, "shards"), i);
      ManifestShard shard;
      shard.meta.key = key;
      shard.meta.dtype = *dtype;
      shard.meta.global_shape = global;
      shard.meta.allow_shape_mismatch = mismatch;
      shard.meta.global_offset = ShapeAt(s, "global_offset", sp);
      shard.meta.local_shape = ShapeAt(s, "local_shape", sp);
      const std::string rp = Sub(sp, "replica_id");
      const json& rid = Kind(At(s, "replica_id", sp), json::value_t::array, rp);
      if (rid.size() > size_t(kMaxManifestDims)) Bad(rp, "too many entries");
      for (size_t r = 0; r < rid.size(); ++r) shard.meta.replica_id.push_back(int32_t(Int(rid[r], Idx(rp, r), 0, INT32_MAX)));
      if (s.contains("flat_range")) {
        const std::string fp = Sub(sp, "flat_range");
        const json& fr = Kind(s["flat_range"], json::value_t::array, fp);
        if (fr.size() != 2) Bad(fp, "must be [begin, end]");
        shard.meta.flat_range = FlatRange{Int(fr[0], Idx(fp, 0), INT64_MIN, INT64_MAX),
                                          Int(fr[1], Idx(fp, 1), INT64_MIN, INT64_MAX)};
      }
      shard.file = FileIndex(s, sp, *m);
      ParseRecord(s, sp, &shard.record);
      m->shards.push_back(std::move(shard));
    }
  }
}

void ParseObjects(const json& j, Manifest* m) {
  for (const auto& [key, o] : Kind(At(j, "objects", ""), json::value_t::object, "objects").items()) {
    const std::string op = "objects['" + key + "']";
    const Shape global = ShapeAt(o, "global_shape", op);
    const json& shards = Kind(At(o, "shards", op), json::value_t::array, Sub(op, "shards"));
    for (size_t i = 0; i < shards.size(); ++i) {
      const json& s = shards[i];
      const std::string sp = Idx(Sub(op, "shards"), i);
      ManifestObject obj;
      obj.meta.key = key;
      obj.meta.global_shape = global;
      obj.meta.global_offset = ShapeAt(s, "global_offset", sp);
      obj.file = FileIndex(s, sp, *m);
      obj.size = uint64_t(IntAt(s, "size", sp, 0, INT64_MAX));
      ParseRecord(s, sp, &obj.record);
      m->objects.push_back(std::move(obj));
    }
  }
}

// Structure and types only; ValidateManifest (manifest_check.cc) checks values.
Status ParseBody(const json& j, Manifest* m) {
  if (!j.is_object() || StrAt(j, "format", "") != "ckpt") return Status::Corruption("not a ckpt manifest");
  m->format_version = int(IntAt(j, "format_version", "", INT32_MIN, INT32_MAX));
  if (m->format_version < kOldestFormatVersion || m->format_version > kFormatVersion)
    return Status::FailedPrecondition("unsupported format_version " + std::to_string(m->format_version) +
                                      " (this build reads " + std::to_string(kOldestFormatVersion) + " to " +
                                      std::to_string(kFormatVersion) + ")");
  if (j.contains("chunk_hash")) {  // optional from version 2; absent = SHA-256
    if (m->format_version < 2) Bad("chunk_hash", "not allowed in format_version 1 (SHA-256 implied)");
    Result<ChunkHash> h = ParseChunkHash(StrAt(j, "chunk_hash", ""));
    if (!h.ok()) return Status::FailedPrecondition("chunk_hash: " + h.status().message());
    m->chunk_hash = *h;
  }
  m->iteration = IntAt(j, "iteration", "", 0, kMaxIteration);
  m->layout = Kind(At(j, "layout", ""), json::value_t::object, "layout");
  m->metadata = Kind(At(j, "metadata", ""), json::value_t::object, "metadata");
  ParseFiles(j, m);
  ParseTensors(j, m);
  ParseObjects(j, m);
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
  Status depth = CheckJsonDepth(body, kMaxManifestJsonDepth);
  if (!depth.ok()) return corrupt(depth.message());
  Manifest m;
  try {
    json j = json::parse("{" + std::string(body));
    Status st = ParseBody(j, &m);
    if (st.code() == Code::kFailedPrecondition)  // an unknown version or hash: not damage
      return Status::FailedPrecondition("manifest '" + path + "': " + st.message());
    if (!st.ok()) return corrupt(st.message());
  } catch (const FieldError& e) {
    return corrupt(e.what());
  } catch (const std::exception& e) {
    return corrupt(std::string("invalid content: ") + e.what());
  }
  Status valid = ValidateManifestFields(m);  // coverage: ValidateManifest, for committed manifests
  if (!valid.ok()) return corrupt(valid.message());
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
