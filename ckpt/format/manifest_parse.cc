// ParseManifest: untrusted manifest bytes -> Manifest, in bounded memory.
//
// Why streaming: a JSON DOM of the whole manifest costs ~12x its text (a
// 100 MB manifest took 1.3 GB to check). nlohmann's callback parser hands us
// each value as it closes; every tensor/object shard is converted into the
// Manifest when its object closes (its chunk triples even earlier) and its
// JSON discarded, so the DOM never holds more than one shard and the cost is
// about the Manifest itself. The same callback refuses duplicate members
// (nlohmann would silently keep the last one: `"iteration":1,"iteration":2`
// must not verify) and a shard listed twice in its tensor as soon as the copy
// closes, not after 10^5 copies have been parsed.
#include <optional>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "ckpt/base/sha256.h"
#include "ckpt/format/manifest.h"
#include "ckpt/format/manifest_check.h"

namespace ckpt {
namespace {

using nlohmann::json;

constexpr std::string_view kHashPrefix = "{\"manifest_sha256\":\"";

// Field access for untrusted JSON: every getter checks the type and range and
// throws FieldError naming the field's path ("tensors['w'].shards[0].file");
// ParseManifest converts it (and any nlohmann exception) into kCorruption.
struct FieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// A format_version / chunk_hash this build does not know: kFailedPrecondition.
struct TooNewError : std::runtime_error {
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

ChunkRecord ParseChunk(const json& c, const std::string& p) {
  if (!c.is_array() || c.size() != 3) Bad(p, "chunk entry is not [file_offset, stored_size, digest]");
  return {uint64_t(Int(c[0], p + ".file_offset", 0, INT64_MAX)), uint64_t(Int(c[1], p + ".stored_size", 0, INT64_MAX)),
          Kind(c[2], json::value_t::string, p + ".sha256").get<std::string>()};
}

// `chunks`: the record's chunk triples, converted as they closed (the JSON
// array left in `j` is empty).
void ParseRecord(const json& j, const std::string& path, std::vector<ChunkRecord> chunks, DatasetRecord* r) {
  r->dataset = StrAt(j, "dataset", path);
  r->chunk_elems = IntAt(j, "chunk_elems", path, INT64_MIN, INT64_MAX);
  auto comp = ParseCompression(StrAt(j, "compression", path));
  if (!comp.ok()) Bad(Sub(path, "compression"), comp.status().message());
  r->compression = *comp;
  r->shuffle = Kind(At(j, "shuffle", path), json::value_t::boolean, Sub(path, "shuffle")).get<bool>();
  const std::string cp = Sub(path, "chunks");
  const json& left = Kind(At(j, "chunks", path), json::value_t::array, cp);
  if (!left.empty()) Bad(Idx(cp, chunks.size()), "chunk entry is not [file_offset, stored_size, digest]");
  r->chunks = std::move(chunks);
}

// One files[] entry; meta_sha256 is read whatever the version (the version
// may come later in the text) and dropped for v1 by ParseBody.
ManifestFile ParseFile(const json& f, const std::string& p) {
  return {StrAt(f, "name", p), int(IntAt(f, "rank", p, 0, INT32_MAX)), uint64_t(IntAt(f, "size", p, 0, INT64_MAX)),
          f.contains("meta_sha256") ? StrAt(f, "meta_sha256", p) : std::string()};
}

// The parser callback (see the file comment). Depths are nlohmann's: the
// root object is 0, "tensors" 1, a tensor 2, its "shards" 3, a shard 4, its
// "chunks" 5, a chunk triple 6.
class StreamingParser {
 public:
  explicit StreamingParser(Manifest* m) : m_(m) {}

  bool Event(int depth, json::parse_event_t event, json& parsed) {
    const size_t d = size_t(depth);
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        Enter(d, event == json::parse_event_t::array_start);
        return true;
      case json::parse_event_t::key:
        Key(d, parsed.get_ref<const std::string&>());
        return true;
      case json::parse_event_t::value:
        if (IsChunk(d)) Bad(ChunkPath(), "chunk entry is not [file_offset, stored_size, digest]");
        if (IsShard(d)) Bad(ShardPath(), std::string("must be an object, not ") + parsed.type_name());
        if (IsEntry(d)) Bad(EntryPath(), std::string("must be an object, not ") + parsed.type_name());
        if (IsFile(d)) Bad(FilePath(), std::string("must be an object, not ") + parsed.type_name());
        if (d == 1 && !in_array_[0] && name_[1] == "format_version") CheckVersion(parsed);
        return true;
      case json::parse_event_t::array_end:
        if (!IsChunk(d)) return true;
        chunks_.push_back(ParseChunk(parsed, ChunkPath()));
        return false;  // converted: drop its JSON
      case json::parse_event_t::object_end:
        if (IsShard(d)) {
          EndShard(parsed);
          return false;
        }
        if (IsEntry(d)) {
          EndEntry(parsed);
          return false;
        }
        if (IsFile(d)) {
          if (m_->files.size() >= kMaxManifestFiles)
            Bad("files", "more than " + std::to_string(kMaxManifestFiles) + " files (docs/FORMAT.md, limits)");
          m_->files.push_back(ParseFile(parsed, FilePath()));
          return false;
        }
        return true;
    }
    return true;
  }

 private:
  void Enter(size_t d, bool array) {
    in_array_.resize(d + 1);
    in_array_[d] = array;
    name_.resize(d + 1);
    members_.resize(d + 1);
    members_[d].clear();
    if (IsEntry(d) && array) Bad(EntryPath(), "must be an object, not array");
    if (IsEntry(d)) {
      entry_first_ = Section() == "tensors" ? m_->shards.size() : m_->objects.size();
      boxes_.clear();
    }
    if (IsChunk(d) && !array) Bad(ChunkPath(), "chunk entry is not [file_offset, stored_size, digest]");
    if (IsShard(d) && array) Bad(ShardPath(), "must be an object, not array");
    if (IsFile(d) && array) Bad(FilePath(), "must be an object, not array");
  }

  void Key(size_t d, const std::string& key) {
    name_.resize(d + 1);
    name_[d] = key;
    if (!members_[d - 1].insert(key).second) Bad(MemberPath(d), "member listed twice (duplicate JSON member)");
  }

  // The value at depth d is a member of an object (name != nullptr: named
  // `name`) or an element of an array (name == nullptr).
  // Only ever asked about open values and their ancestors.
  bool Is(size_t d, const char* name) const {
    if (d == 0 || d > in_array_.size()) return false;
    if (name == nullptr) return in_array_[d - 1];
    return !in_array_[d - 1] && d < name_.size() && name_[d] == name;
  }
  bool IsEntry(size_t d) const { return d == 2 && (Is(1, "tensors") || Is(1, "objects")) && !in_array_[1]; }
  bool IsShard(size_t d) const { return d == 4 && IsEntry(2) && Is(3, "shards") && Is(4, nullptr); }
  bool IsChunk(size_t d) const { return d == 6 && IsShard(4) && Is(5, "chunks") && Is(6, nullptr); }
  bool IsFile(size_t d) const { return d == 2 && Is(1, "files") && Is(2, nullptr); }
  const std::string& Section() const { return name_[1]; }

  size_t EntryShards() const {
    return (Section() == "tensors" ? m_->shards.size() : m_->objects.size()) - entry_first_;
  }
  std::string FilePath() const { return Idx("files", m_->files.size()); }
  std::string EntryPath() const { return Section() + "['" + name_[2] + "']"; }
  std::string ShardPath() const { return Idx(EntryPath() + ".shards", EntryShards()); }
  std::string ChunkPath() const { return Idx(ShardPath() + ".chunks", chunks_.size()); }
  std::string MemberPath(size_t d) const {
    std::string p;
    for (size_t i = 1; i <= d; ++i) p = in_array_[i - 1] ? p + "[]" : Sub(p, name_[i].substr(0, 80));
    return p;
  }

  void CheckVersion(const json& v) {
    const int64_t version = Int(v, "format_version", INT32_MIN, INT32_MAX);
    if (version < kOldestFormatVersion || version > kFormatVersion)
      throw TooNewError("unsupported format_version " + std::to_string(version) + " (this build reads " +
                        std::to_string(kOldestFormatVersion) + " to " + std::to_string(kFormatVersion) + ")");
  }

  // A shard listed twice in its tensor (same box and flat range) is refused
  // when the copy closes: memory stays that of one tensor's boxes.
  // Keyed by a hash of the box (8 bytes a shard); a hit is compared in full.
  void CheckNotListedTwice(const Shape& offset, const Shape& shape, const std::optional<FlatRange>& range) {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](int64_t v) { h = (h ^ uint64_t(v)) * 1099511628211ull; };
    for (int64_t v : offset) mix(v);
    mix(INT64_MIN);
    for (int64_t v : shape) mix(v);
    mix(range ? range->begin : INT64_MIN);
    mix(range ? range->end : INT64_MIN);
    auto same = [&](size_t i) {
      if (Section() != "tensors") return m_->objects[entry_first_ + i].meta.global_offset == offset;
      const ShardedTensor& t = m_->shards[entry_first_ + i].meta;
      return t.global_offset == offset && t.local_shape == shape && t.flat_range.has_value() == range.has_value() &&
             (!range || (t.flat_range->begin == range->begin && t.flat_range->end == range->end));
    };
    for (auto [it, end] = boxes_.equal_range(h); it != end; ++it)
      if (same(it->second))
        Bad(ShardPath(), "overlaps shards[" + std::to_string(it->second) +
                             "] entirely: the same box and flat range (a shard listed twice)");
    boxes_.emplace(h, EntryShards());
  }

  void EndShard(const json& s) {
    const std::string sp = ShardPath();
    if (Section() == "tensors") {
      ManifestShard shard;
      shard.meta.key = name_[2];
      shard.meta.global_offset = ShapeAt(s, "global_offset", sp);
      shard.meta.local_shape = ShapeAt(s, "local_shape", sp);
      const std::string rp = Sub(sp, "replica_id");
      const json& rid = Kind(At(s, "replica_id", sp), json::value_t::array, rp);
      if (rid.size() > size_t(kMaxManifestDims)) Bad(rp, "too many entries");
      for (size_t r = 0; r < rid.size(); ++r)
        shard.meta.replica_id.push_back(int32_t(Int(rid[r], Idx(rp, r), 0, INT32_MAX)));
      if (s.contains("flat_range")) {
        const std::string fp = Sub(sp, "flat_range");
        const json& fr = Kind(s["flat_range"], json::value_t::array, fp);
        if (fr.size() != 2) Bad(fp, "must be [begin, end]");
        shard.meta.flat_range = FlatRange{Int(fr[0], Idx(fp, 0), INT64_MIN, INT64_MAX),
                                          Int(fr[1], Idx(fp, 1), INT64_MIN, INT64_MAX)};
      }
      shard.file = int(IntAt(s, "file", sp, 0, INT32_MAX));  // < files.size(): ValidateManifestFields
      ParseRecord(s, sp, std::move(chunks_), &shard.record);
      CheckNotListedTwice(shard.meta.global_offset, shard.meta.local_shape, shard.meta.flat_range);
      m_->shards.push_back(std::move(shard));
    } else {
      ManifestObject obj;
      obj.meta.key = name_[2];
      obj.meta.global_offset = ShapeAt(s, "global_offset", sp);
      obj.file = int(IntAt(s, "file", sp, 0, INT32_MAX));
      obj.size = uint64_t(IntAt(s, "size", sp, 0, INT64_MAX));
      ParseRecord(s, sp, std::move(chunks_), &obj.record);
      CheckNotListedTwice(obj.meta.global_offset, {}, std::nullopt);
      m_->objects.push_back(std::move(obj));
    }
    chunks_.clear();
  }

  // The tensor's (object's) own members, into the shards it closed over.
  void EndEntry(const json& t) {
    const std::string tp = EntryPath();
    const Shape global = ShapeAt(t, "global_shape", tp);
    const json& shards = Kind(At(t, "shards", tp), json::value_t::array, Sub(tp, "shards"));
    if (!shards.empty()) Bad(ShardPath(), "must be an object");
    if (Section() == "objects") {
      for (size_t i = entry_first_; i < m_->objects.size(); ++i) m_->objects[i].meta.global_shape = global;
      return;
    }
    auto dtype = ParseDType(StrAt(t, "dtype", tp));
    if (!dtype.ok()) Bad(Sub(tp, "dtype"), dtype.status().message());
    bool mismatch = false;
    if (t.contains("allow_shape_mismatch"))
      mismatch = Kind(t["allow_shape_mismatch"], json::value_t::boolean, Sub(tp, "allow_shape_mismatch")).get<bool>();
    for (size_t i = entry_first_; i < m_->shards.size(); ++i) {
      m_->shards[i].meta.dtype = *dtype;
      m_->shards[i].meta.global_shape = global;
      m_->shards[i].meta.allow_shape_mismatch = mismatch;
    }
  }

  Manifest* m_;
  std::vector<bool> in_array_;                 // per open container depth: an array?
  std::vector<std::string> name_;              // per depth: the member name of the open value
  std::vector<std::set<std::string>> members_; // per open object depth: member names seen
  std::vector<ChunkRecord> chunks_;            // the open shard's chunks, converted
  size_t entry_first_ = 0;                     // the open tensor's first index in m_->shards/objects
  std::unordered_multimap<uint64_t, size_t> boxes_;  // box hash -> the open tensor's shard index
};

// The root's members (tensors and objects were converted while parsing and
// are left as empty objects).
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
  Kind(At(j, "files", ""), json::value_t::array, "files");  // its entries were converted while parsing
  for (size_t i = 0; i < m->files.size(); ++i) {
    if (m->format_version < 2) m->files[i].meta_sha256.clear();  // not part of v1
    else if (m->files[i].meta_sha256.empty()) Bad(Idx("files", i) + ".meta_sha256", "missing");
  }
  Kind(At(j, "tensors", ""), json::value_t::object, "tensors");
  Kind(At(j, "objects", ""), json::value_t::object, "objects");
  return Status::Ok();
}

}  // namespace

Result<Manifest> ParseManifest(std::string_view bytes, const std::string& path) {
  auto corrupt = [&](const std::string& why) { return Status::Corruption("manifest '" + path + "': " + why); };
  if (bytes.size() > kMaxManifestBytes)
    return corrupt(std::to_string(bytes.size()) + " bytes, more than the limit of " +
                   std::to_string(kMaxManifestBytes) + " (docs/FORMAT.md, limits)");
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
    // The whole file is `{"manifest_sha256":"<hex>",` + body: parsed in place
    // (no copy); the hash member is ignored, a body repeating it is refused.
    StreamingParser parser(&m);
    json j = json::parse(bytes, [&parser](int d, json::parse_event_t e, json& v) { return parser.Event(d, e, v); });
    Status st = ParseBody(j, &m);
    if (st.code() == Code::kFailedPrecondition)  // an unknown version or hash: not damage
      return Status::FailedPrecondition("manifest '" + path + "': " + st.message());
    if (!st.ok()) return corrupt(st.message());
  } catch (const TooNewError& e) {
    return Status::FailedPrecondition("manifest '" + path + "': " + e.what());
  } catch (const FieldError& e) {
    return corrupt(e.what());
  } catch (const std::exception& e) {
    return corrupt(std::string("invalid content: ") + e.what());
  }
  Status valid = ValidateManifestFields(m);  // coverage: ValidateManifest, for committed manifests
  if (!valid.ok()) return corrupt(valid.message());
  return m;
}

}  // namespace ckpt
