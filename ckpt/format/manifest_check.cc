// ValidateManifest / CheckJsonDepth: a parsed manifest's fields checked
// against each other before anything is allocated or read by them.
#include <algorithm>
#include <map>
#include <set>

#include "ckpt/format/manifest.h"
#include "ckpt/format/manifest_check.h"
#include "reshard/geometry/intersect.h"

namespace ckpt {
namespace {

std::string N(uint64_t v) { return std::to_string(v); }

// a * b and a + b for non-negative values, false on int64 overflow.
bool MulOk(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
bool AddOk(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

// Elements of `shape` (1 for rank 0), all dims >= 0; error names `field`.
Result<int64_t> CheckedElements(const Shape& shape, const std::string& field) {
  if (shape.size() > size_t(kMaxManifestDims))
    return Status::Corruption(field + ": " + N(shape.size()) + " dimensions (at most " + N(kMaxManifestDims) + ")");
  int64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) return Status::Corruption(field + "[" + N(i) + "]: negative extent " + std::to_string(shape[i]));
    if (!MulOk(n, shape[i], &n))
      return Status::Corruption(field + " " + ShapeToString(shape) + ": element count overflows int64");
  }
  return n;
}

bool IsLowerHex(const std::string& h, size_t digits) {
  return h.size() == digits &&
         std::all_of(h.begin(), h.end(), [](char x) { return (x >= '0' && x <= '9') || (x >= 'a' && x <= 'f'); });
}

Status CheckFiles(const Manifest& m) {
  std::set<std::string> names;
  for (size_t i = 0; i < m.files.size(); ++i) {
    const std::string p = "files[" + N(i) + "].name";
    const std::string& n = m.files[i].name;
    if (n.empty() || n == "." || n == ".." || n.size() > 255 || n.find('/') != std::string::npos ||
        n.find('\0') != std::string::npos)
      return Status::Corruption(p + ": '" + n.substr(0, 80) + "' is not a plain file name in the iteration directory");
    if (!names.insert(n).second) return Status::Corruption(p + ": '" + n + "' is listed twice");
    if (m.files[i].size > uint64_t(INT64_MAX)) return Status::Corruption("files[" + N(i) + "].size: out of range");
    if (m.format_version >= 2 && !IsLowerHex(m.files[i].meta_sha256, 64))
      return Status::Corruption("files[" + N(i) + "].meta_sha256: not 64 lowercase hex digits");
  }
  return Status::Ok();
}

// The chunk layout of a dataset of `dims` (ShardFileWriter's PlanLayout):
// chunks of c0 whole rows, c0 in [1, dims[0]], ceil(dims[0] / c0) of them.
Status CheckChunkLayout(const DatasetRecord& r, const Shape& dims, size_t elem_size, ChunkHash hash,
                        const std::string& p) {
  const size_t digits = ChunkHashHexDigits(hash);
  int64_t row = 1;
  for (size_t i = 1; i < dims.size(); ++i) row *= dims[i];  // no overflow: the box's count fits
  const int64_t rows = dims.empty() ? 1 : dims[0];
  if (row == 0 || rows == 0) {
    if (r.chunk_elems != 0 || !r.chunks.empty())
      return Status::Corruption(p + ".chunk_elems: " + std::to_string(r.chunk_elems) + " with " +
                                N(r.chunks.size()) + " chunks for an empty dataset");
    return Status::Ok();
  }
  if (r.chunk_elems <= 0 || r.chunk_elems % row != 0 || r.chunk_elems / row > rows)
    return Status::Corruption(p + ".chunk_elems: " + std::to_string(r.chunk_elems) + " is not a whole number of rows (" +
                              std::to_string(row) + " elements each) between 1 and " + std::to_string(rows) + " rows");
  int64_t raw = 0;
  if (!MulOk(r.chunk_elems, int64_t(elem_size), &raw) || uint64_t(raw) > 0xffffffffull)
    return Status::Corruption(p + ".chunk_elems: " + std::to_string(r.chunk_elems) + " makes chunks over 4 GiB");
  const int64_t c0 = r.chunk_elems / row;
  const int64_t want = rows / c0 + (rows % c0 != 0);  // ceil without rows + c0 - 1 (rows may be INT64_MAX)
  if (int64_t(r.chunks.size()) != want)
    return Status::Corruption(p + ".chunks: " + N(r.chunks.size()) + " chunks, the layout (chunk_elems " +
                              std::to_string(r.chunk_elems) + ") has " + std::to_string(want));
  for (size_t c = 0; c < r.chunks.size(); ++c) {
    const ChunkRecord& ch = r.chunks[c];
    const std::string cp = p + ".chunks[" + N(c) + "]";
    if (r.compression == Compression::kNone && ch.stored_size != uint64_t(raw))
      return Status::Corruption(cp + ".stored_size: " + N(ch.stored_size) + " bytes, a raw chunk has " + N(raw));
    if (r.compression == Compression::kZstd &&
        (ch.stored_size == 0 || uint64_t(raw) / kMaxZstdExpansion > ch.stored_size))
      return Status::Corruption(cp + ".stored_size: " + N(ch.stored_size) + " bytes cannot hold a zstd frame of " +
                                N(raw) + " bytes (chunk_elems " + std::to_string(r.chunk_elems) + ")");
    if (!IsLowerHex(ch.sha256, digits))
      return Status::Corruption(cp + "." + std::string(ChunkHashName(hash)) + ": not " + N(digits) +
                                " lowercase hex digits");
  }
  return Status::Ok();
}

// Chunk byte ranges per file: inside the recorded size, never overlapping,
// and the file's bytes outside them bounded (kMetaBytes*, manifest.h). A range
// names its owner by index (16 bytes + 16 a chunk, not a path string each);
// the path is spelled only for an error.
class ChunkRanges {
 public:
  explicit ChunkRanges(const Manifest& m) : m_(m), per_file_(m.files.size()) {}
  Status Add(int file, const std::string& key, const DatasetRecord& r, bool object, size_t owner,
             const std::string& p) {
    PerFile& f = per_file_[size_t(file)];
    // Its object header and link repeat the key and the dataset path (attributes).
    f.meta_limit += kMetaBytesPerDataset + 4 * (key.size() + r.dataset.size());
    for (size_t c = 0; c < r.chunks.size(); ++c) {
      int64_t end = 0;
      const ChunkRecord& ch = r.chunks[c];
      if (!Add64(ch.file_offset, ch.stored_size, &end) || uint64_t(end) > m_.files[size_t(file)].size)
        return Status::Corruption(p + ".chunks[" + N(c) + "]: file_offset " + N(ch.file_offset) + " + stored_size " +
                                  N(ch.stored_size) + " lies outside file '" + m_.files[size_t(file)].name + "' (" +
                                  N(m_.files[size_t(file)].size) + " bytes)");
      f.ranges.push_back({ch.file_offset, uint64_t(end), object, uint32_t(c), owner});
    }
    return Status::Ok();
  }
  Status Check() {
    for (size_t file = 0; file < per_file_.size(); ++file) {
      auto& v = per_file_[file].ranges;
      std::sort(v.begin(), v.end(), [](const Range& a, const Range& b) { return a.begin < b.begin; });
      uint64_t chunk_bytes = 0;
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0 && v[i].begin < v[i - 1].end)
          return Status::Corruption(Field(v[i]) + ": bytes [" + N(v[i].begin) + ", " + N(v[i].end) + ") of file '" +
                                    m_.files[file].name + "' overlap " + Field(v[i - 1]));
        chunk_bytes += v[i].end - v[i].begin;  // disjoint, inside the file: no overflow
      }
      CKPT_RETURN_IF_ERROR(CheckOutside(file, chunk_bytes));
    }
    return Status::Ok();
  }

 private:
  static bool Add64(uint64_t a, uint64_t b, int64_t* out) { return AddOk(int64_t(a), int64_t(b), out); }
  struct Range {
    uint64_t begin, end;
    bool object;     // in m_.objects (else m_.shards)
    uint32_t chunk;
    size_t owner;    // index into m_.shards / m_.objects
  };
  struct PerFile {
    std::vector<Range> ranges;
    uint64_t meta_limit = kMetaBytesBase;
  };

  Status CheckOutside(size_t file, uint64_t chunk_bytes) const {
    const PerFile& f = per_file_[file];
    const uint64_t limit = f.meta_limit + kMetaBytesPerChunk * f.ranges.size();
    const uint64_t outside = m_.files[file].size - chunk_bytes;
    if (outside <= limit) return Status::Ok();
    return Status::Corruption("files[" + N(file) + "].size: " + N(m_.files[file].size) + " bytes for file '" +
                              m_.files[file].name + "', but its " + N(f.ranges.size()) + " chunks hold " +
                              N(chunk_bytes) + " and its HDF5 metadata at most " + N(limit) +
                              " more (docs/FORMAT.md, limits): not the file's real extent");
  }

  std::string Field(const Range& r) const {
    const std::string& key = r.object ? m_.objects[r.owner].meta.key : m_.shards[r.owner].meta.key;
    size_t index = 0;  // the owner's index among its key's shards
    for (size_t i = 0; i < r.owner; ++i)
      index += (r.object ? m_.objects[i].meta.key : m_.shards[i].meta.key) == key;
    return std::string(r.object ? "objects" : "tensors") + "['" + key + "'].shards[" + N(index) + "].chunks[" +
           N(r.chunk) + "]";
  }

  const Manifest& m_;
  std::vector<PerFile> per_file_;
};

Status CheckShard(const ManifestShard& s, ChunkHash hash, const std::string& p) {
  const ShardedTensor& t = s.meta;
  const std::string tp = "tensors['" + t.key + "']";
  if (t.key.empty()) return Status::Corruption("tensors: empty key");
  CKPT_ASSIGN_OR_RETURN(int64_t global, CheckedElements(t.global_shape, tp + ".global_shape"));
  int64_t bytes = 0;
  if (!MulOk(global, int64_t(DTypeSize(t.dtype)), &bytes))
    return Status::Corruption(tp + ".global_shape " + ShapeToString(t.global_shape) + ": byte count overflows int64");
  if (t.global_offset.size() != t.global_shape.size() || t.local_shape.size() != t.global_shape.size())
    return Status::Corruption(p + ".global_offset/local_shape: rank differs from global_shape " +
                              ShapeToString(t.global_shape));
  for (size_t i = 0; i < t.global_shape.size(); ++i) {
    int64_t end = 0;
    if (t.global_offset[i] < 0 || t.local_shape[i] < 0 || !AddOk(t.global_offset[i], t.local_shape[i], &end) ||
        end > t.global_shape[i])
      return Status::Corruption(p + ".global_offset/local_shape: box " + ShapeToString(t.global_offset) + " + " +
                                ShapeToString(t.local_shape) + " outside global_shape " + ShapeToString(t.global_shape) +
                                " on axis " + N(i));
  }
  const int64_t box = NumElements(t.local_shape);  // <= global: no overflow
  if (t.flat_range && (t.flat_range->begin < 0 || t.flat_range->end < t.flat_range->begin || t.flat_range->end > box))
    return Status::Corruption(p + ".flat_range: [" + std::to_string(t.flat_range->begin) + ", " +
                              std::to_string(t.flat_range->end) + ") outside the box of " + std::to_string(box) +
                              " elements");
  const Shape dims = t.flat_range ? Shape{t.flat_range->size()} : t.local_shape.empty() ? Shape{1} : t.local_shape;
  return CheckChunkLayout(s.record, dims, DTypeSize(t.dtype), hash, p);
}

Status CheckObject(const ManifestObject& o, ChunkHash hash, const std::string& p) {
  const std::string op = "objects['" + o.meta.key + "']";
  if (o.meta.key.empty()) return Status::Corruption("objects: empty key");
  CKPT_ASSIGN_OR_RETURN(int64_t cells, CheckedElements(o.meta.global_shape, op + ".global_shape"));
  if (cells > (int64_t(1) << 31)) return Status::Corruption(op + ".global_shape: grid of " + std::to_string(cells) + " cells");
  if (o.meta.global_offset.size() != o.meta.global_shape.size())
    return Status::Corruption(p + ".global_offset: rank differs from global_shape");
  for (size_t i = 0; i < o.meta.global_shape.size(); ++i)
    if (o.meta.global_offset[i] < 0 || o.meta.global_offset[i] >= o.meta.global_shape[i])
      return Status::Corruption(p + ".global_offset: " + ShapeToString(o.meta.global_offset) + " outside the grid " +
                                ShapeToString(o.meta.global_shape));
  if (o.size > uint64_t(INT64_MAX)) return Status::Corruption(p + ".size: out of range");
  return CheckChunkLayout(o.record, Shape{int64_t(o.size)}, 1, hash, p);
}

// One tensor at a time (shards ordered by key through an index): memory is
// that of the largest tensor's descriptors, not a copy of every shard's.
Status CheckCoverageOfAll(const Manifest& m) {
  std::vector<uint32_t> order(m.shards.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = uint32_t(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return m.shards[a].meta.key < m.shards[b].meta.key; });
  std::vector<ShardedTensor> shards;
  for (size_t i = 0; i < order.size();) {
    const std::string& key = m.shards[order[i]].meta.key;
    shards.clear();
    for (; i < order.size() && m.shards[order[i]].meta.key == key; ++i) shards.push_back(m.shards[order[i]].meta);
    Status st = reshard::CheckCoverage(key, shards[0].global_shape, shards);
    if (!st.ok()) return Status::Corruption("tensors['" + key + "'].shards do not cover the tensor exactly once: " + st.message());
  }
  return Status::Ok();
}

}  // namespace

Status ValidateManifest(const Manifest& m) {
  CKPT_RETURN_IF_ERROR(ValidateManifestFields(m));
  return CheckCoverageOfAll(m);
}

Status ValidateManifestFields(const Manifest& m) {
  if (m.iteration < 0 || m.iteration > kMaxIteration)
    return Status::Corruption("iteration: " + std::to_string(m.iteration) + " is out of range");
  CKPT_RETURN_IF_ERROR(CheckFiles(m));
  ChunkRanges ranges(m);
  std::map<std::string, int> seen;
  for (const auto& s : m.shards) {
    const std::string p = "tensors['" + s.meta.key + "'].shards[" + N(seen[s.meta.key]++) + "]";
    if (s.file < 0 || size_t(s.file) >= m.files.size()) return Status::Corruption(p + ".file: no file " + N(s.file));
    CKPT_RETURN_IF_ERROR(CheckShard(s, m.chunk_hash, p));
    CKPT_RETURN_IF_ERROR(ranges.Add(s.file, s.meta.key, s.record, false, size_t(&s - m.shards.data()), p));
  }
  seen.clear();
  for (const auto& o : m.objects) {
    const std::string p = "objects['" + o.meta.key + "'].shards[" + N(seen[o.meta.key]++) + "]";
    if (o.file < 0 || size_t(o.file) >= m.files.size()) return Status::Corruption(p + ".file: no file " + N(o.file));
    CKPT_RETURN_IF_ERROR(CheckObject(o, m.chunk_hash, p));
    CKPT_RETURN_IF_ERROR(ranges.Add(o.file, o.meta.key, o.record, true, size_t(&o - m.objects.data()), p));
  }
  return ranges.Check();
}

Status CheckJsonDepth(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false, escaped = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return Status::Corruption("JSON nests deeper than " + N(max_depth) + " levels (depth limit) at byte " + N(i));
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return Status::Ok();
}

}  // namespace ckpt
