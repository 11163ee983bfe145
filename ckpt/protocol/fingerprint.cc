// Layout-invariant fingerprint and diff (see fingerprint.h): tensors are read
// in blocks of global rows through planned reads with a per-shard chunk cache.
#include "ckpt/protocol/fingerprint.h"
#include "ckpt/base/clock.h"
#include "ckpt/protocol/commit.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/format/chunk_reader.h"
#include "ckpt/base/sha256.h"
#include "reshard/family.h"
#include "reshard/geometry/read_plan.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;

// One committed checkpoint opened for reading; stable in memory (the reader points at the manifest).
struct Source {
  std::unique_ptr<Storage> owned;  // the root when opened here; outlives the reader
  Manifest manifest;
  std::unique_ptr<ChunkReader> reader;
  std::map<std::string, std::vector<int>> shards_by_key;  // manifest shard indices
  std::map<std::string, std::vector<int>> objects_by_key;
  std::optional<reshard::ModelRef> model;  // the recorded model family, if any
  int64_t peak_buffer = 0;
};

Result<std::unique_ptr<Source>> Open(const std::string& root, const FingerprintOptions& o) {
  auto src = std::make_unique<Source>();
  Storage* storage = o.storage;
  if (!storage) {
    CKPT_ASSIGN_OR_RETURN(src->owned, OpenRoot(o.env, root));  // any URL
    storage = src->owned.get();
  }
  CKPT_ASSIGN_OR_RETURN(src->manifest, ReadManifest(storage, o.iteration));
  const Manifest& m = src->manifest;
  src->reader = std::make_unique<ChunkReader>(storage->env(), IterationDir(storage, m.iteration), &m, o.verify_hashes);
  for (int i = 0; i < int(m.shards.size()); ++i) src->shards_by_key[m.shards[i].meta.key].push_back(i);
  for (int i = 0; i < int(m.objects.size()); ++i) src->objects_by_key[m.objects[i].meta.key].push_back(i);
  auto model = reshard::ModelOf(m.metadata);
  if (!model.ok())
    return Status(model.status().code(), storage->url() + " iteration " + std::to_string(m.iteration) +
                                             ": fingerprint: " + model.status().message());
  src->model = std::move(*model);
  return src;
}

// Reads one tensor key of a Source in blocks of whole global rows.
class RowReader {
 public:
  RowReader(Source* src, const std::string& key) : src_(src), key_(key) {
    for (int i : src->shards_by_key.at(key)) {
      const ManifestShard& s = src->manifest.shards[i];
      shards_.push_back(&s);
      saved_.push_back({s.meta, s.file, s.record.chunk_elems, {}});
    }
    const ShardedTensor& t = shards_.front()->meta;
    dtype_ = t.dtype;
    shape_ = t.global_shape;
    saved_rows_ = shape_.empty() ? 1 : shape_[0];
    row_elems_ = shape_.empty() ? 1 : NumElements(Shape(shape_.begin() + 1, shape_.end()));
    canonical_rows_ = saved_rows_;
    if (t.allow_shape_mismatch && !shape_.empty() && src->model) {
      const int64_t rows = src->model->family->CanonicalRows(src->model->config, t);
      if (rows >= 0 && rows <= saved_rows_) canonical_rows_ = rows;
    }
    cache_.assign(saved_.size(), {-1, {}});
  }

  DType dtype() const { return dtype_; }
  const Shape& saved_shape() const { return shape_; }
  int64_t saved_rows() const { return saved_rows_; }
  int64_t canonical_rows() const { return canonical_rows_; }
  int64_t row_bytes() const { return row_elems_ * int64_t(DTypeSize(dtype_)); }
  int shards() const { return int(saved_.size()); }
  Shape canonical_shape() const {
    Shape s = shape_;
    if (!s.empty()) s[0] = canonical_rows_;
    return s;
  }
  int64_t BlockRows(int64_t block_bytes) const {
    return row_bytes() > 0 ? std::max<int64_t>(1, block_bytes / row_bytes()) : std::max<int64_t>(1, saved_rows_);
  }

  // Global rows [r0, r1) (every trailing index) in row-major order.
  Result<std::span<const std::byte>> Read(int64_t r0, int64_t r1) {
    ShardedTensor req;
    req.key = key_;
    req.dtype = dtype_;
    req.global_shape = shape_;
    req.allow_shape_mismatch = shards_.front()->meta.allow_shape_mismatch;
    req.global_offset = Shape(shape_.size(), 0);
    req.local_shape = shape_;
    if (!shape_.empty()) {
      req.global_offset[0] = r0;
      req.local_shape[0] = r1 - r0;
    }
    CKPT_ASSIGN_OR_RETURN(reshard::ReadPlan plan, reshard::PlanReads(saved_, {req}));
    const size_t es = DTypeSize(dtype_);
    block_.assign(size_t(req.num_elements()) * es, std::byte{0});
    for (const reshard::ChunkRead& cr : plan.requests[0].reads) {
      CKPT_ASSIGN_OR_RETURN(std::span<const std::byte> chunk, Chunk(cr.saved_shard, cr.chunk));
      for (const reshard::CopyRun& run : cr.runs) {
        if (size_t(run.src + run.len) * es > chunk.size())
          return Status::Corruption("tensor '" + key_ + "': chunk " + std::to_string(cr.chunk) + " of " +
                                    src_->reader->FilePath(saved_[cr.saved_shard].file_index) +
                                    " is shorter than its layout");
        std::memcpy(block_.data() + run.dst * es, chunk.data() + run.src * es, size_t(run.len) * es);
      }
    }
    int64_t held = int64_t(block_.size());
    for (const auto& c : cache_) held += int64_t(c.second.size());
    src_->peak_buffer = std::max(src_->peak_buffer, held);
    return std::span<const std::byte>(block_);
  }

 private:
  // The decoded chunk, from the per-shard cache when it is the one read last.
  Result<std::span<const std::byte>> Chunk(int s, int64_t c) {
    auto& [index, bytes] = cache_[size_t(s)];
    if (index != c) {
      const ManifestShard& ms = *shards_[size_t(s)];
      CKPT_ASSIGN_OR_RETURN(auto got, src_->reader->ReadDecoded(ms.file, ms.record, c, DTypeSize(dtype_),
                                                                 "tensor '" + key_ + "'"));
      bytes.assign(got.begin(), got.end());
      index = c;
    }
    return std::span<const std::byte>(bytes);
  }

  Source* src_;
  std::string key_;
  std::vector<const ManifestShard*> shards_;
  std::vector<reshard::SavedShard> saved_;
  DType dtype_ = DType::kFloat32;
  Shape shape_;
  int64_t saved_rows_ = 0, row_elems_ = 0, canonical_rows_ = 0;
  std::vector<std::pair<int64_t, std::vector<std::byte>>> cache_;
  std::vector<std::byte> block_;
};

// Calls fn(first_row, block) over rows [begin, end) in blocks.
template <typename Fn>
Status ForEachBlock(RowReader& rr, int64_t begin, int64_t end, int64_t block_bytes, Fn fn) {
  const int64_t step = rr.BlockRows(block_bytes);
  for (int64_t r = begin; r < end; r += step) {
    const int64_t e = std::min(end, r + step);
    CKPT_ASSIGN_OR_RETURN(std::span<const std::byte> block, rr.Read(r, e));
    CKPT_RETURN_IF_ERROR(fn(r, e, block));
  }
  return Status::Ok();
}

// Non-zero elements in the vocabulary padding rows (not canonical state).
Result<int64_t> PaddingNonzero(RowReader& rr, int64_t block_bytes) {
  int64_t nonzero = 0;
  const size_t es = DTypeSize(rr.dtype());
  CKPT_RETURN_IF_ERROR(ForEachBlock(rr, rr.canonical_rows(), rr.saved_rows(), block_bytes,
                                    [&](int64_t, int64_t, std::span<const std::byte> b) {
                                      for (size_t i = 0; i < b.size(); i += es)
                                        nonzero += std::any_of(b.begin() + i, b.begin() + i + es,
                                                               [](std::byte x) { return x != std::byte{0}; });
                                      return Status::Ok();
                                    }));
  return nonzero;
}

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s.data(), s.size())); }

std::string Header(const std::string& key, DType t, const Shape& shape) {
  return std::string("ckpt-fingerprint-v1", 20) + key + '\0' + std::string(DTypeName(t)) + '\0' + ShapeToString(shape) + '\0';
}

Result<TensorFingerprint> FingerprintTensor(Source& src, const std::string& key, int64_t block_bytes) {
  RowReader rr(&src, key);
  TensorFingerprint tf{key, rr.dtype(), rr.saved_shape(), rr.canonical_shape(), rr.shards(), 0, 0, {}};
  Sha256 h;
  h.Update(Bytes(Header(key, tf.dtype, tf.canonical_shape)));
  CKPT_RETURN_IF_ERROR(ForEachBlock(rr, 0, rr.canonical_rows(), block_bytes, [&](int64_t, int64_t, std::span<const std::byte> b) {
    h.Update(b);
    tf.bytes += int64_t(b.size());
    return Status::Ok();
  }));
  CKPT_ASSIGN_OR_RETURN(tf.padding_nonzero, PaddingNonzero(rr, block_bytes));
  if (tf.padding_nonzero > 0) h.Update(Bytes("padding_nonzero=" + std::to_string(tf.padding_nonzero)));
  tf.digest = h.FinishHex();
  return tf;
}

// The blob of a one-cell object.
Result<std::vector<std::byte>> ReadObject(Source& src, const ManifestObject& o) {
  std::vector<std::byte> out;
  for (int64_t c = 0; c < int64_t(o.record.chunks.size()); ++c) {
    CKPT_ASSIGN_OR_RETURN(auto b, src.reader->ReadDecoded(o.file, o.record, c, 1, "object '" + o.meta.key + "'"));
    out.insert(out.end(), b.begin(), b.end());
  }
  out.resize(o.size);
  return out;
}

bool OneCell(const ManifestObject& o) { return NumElements(o.meta.global_shape) == 1; }

}  // namespace

Result<Fingerprint> FingerprintCheckpoint(const std::string& root, const FingerprintOptions& opts) {
  const auto start = Clock::now();
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Source> src, Open(root, opts));
  Fingerprint fp;
  fp.iteration = src->manifest.iteration;
  Sha256 all;
  for (const auto& [key, idx] : src->shards_by_key) {
    CKPT_ASSIGN_OR_RETURN(TensorFingerprint tf, FingerprintTensor(*src, key, opts.block_bytes));
    all.Update(Bytes("tensor " + key + " " + tf.digest + "\n"));
    fp.bytes_hashed += tf.bytes;
    fp.tensors.push_back(std::move(tf));
  }
  for (const auto& [key, idx] : src->objects_by_key) {
    const ManifestObject& o = src->manifest.objects[size_t(idx.front())];
    ObjectFingerprint of{key, int64_t(idx.size()), OneCell(o) && idx.size() == 1, {}};
    if (of.included) {
      CKPT_ASSIGN_OR_RETURN(std::vector<std::byte> blob, ReadObject(*src, o));
      Sha256 h;
      h.Update(Bytes(Header(key, DType::kUInt8, {int64_t(blob.size())})));
      h.Update(blob);
      of.digest = h.FinishHex();
      fp.bytes_hashed += int64_t(blob.size());
      all.Update(Bytes("object " + key + " " + of.digest + "\n"));
    }
    fp.objects.push_back(std::move(of));
  }
  fp.digest = all.FinishHex();
  fp.bytes_read = src->reader->bytes_read();
  fp.chunks_read = src->reader->chunks_read();
  fp.peak_buffer_bytes = src->peak_buffer;
  fp.seconds = Since(start);
  return fp;
}

uint64_t UlpDistance(DType t, const std::byte* a, const std::byte* b) {
  auto float_bits = [&](int bits, int mant) -> uint64_t {
    uint64_t x = 0, y = 0;
    std::memcpy(&x, a, size_t(bits / 8));
    std::memcpy(&y, b, size_t(bits / 8));
    if (x == y) return 0;
    const uint64_t sign = uint64_t(1) << (bits - 1), inf = ((sign - 1) >> mant) << mant;
    const uint64_t mx = x & (sign - 1), my = y & (sign - 1);
    if (mx > inf || my > inf) return kUlpNaN;
    if ((x & sign) == (y & sign)) return mx > my ? mx - my : my - mx;
    return mx + my;  // opposite signs: distance through zero (+0 and -0 are 0 apart)
  };
  auto int_bits = [&]<typename T>(T) -> uint64_t {
    T x, y;
    std::memcpy(&x, a, sizeof(T));
    std::memcpy(&y, b, sizeof(T));
    return x >= y ? uint64_t(x) - uint64_t(y) : uint64_t(y) - uint64_t(x);
  };
  switch (t) {
    case DType::kFloat32: return float_bits(32, 23);
    case DType::kFloat64: return float_bits(64, 52);
    case DType::kBFloat16: return float_bits(16, 7);
    case DType::kFloat16: return float_bits(16, 10);
    case DType::kInt64: return int_bits(int64_t{});
    case DType::kInt32: return int_bits(int32_t{});
    case DType::kInt16: return int_bits(int16_t{});
    case DType::kInt8: return int_bits(int8_t{});
    case DType::kUInt8:
    case DType::kBool: return int_bits(uint8_t{});
  }
  return kUlpNaN;
}

uint64_t CheckpointDiff::max_ulp() const {
  uint64_t m = 0;
  for (const auto& t : tensors)
    if (t.status == "differ") m = std::max(m, t.max_ulp);
  return m;
}

namespace {

Shape Unravel(int64_t flat, const Shape& shape) {
  Shape idx(shape.size(), 0);
  for (int d = int(shape.size()) - 1; d >= 0; --d) {
    if (shape[d] > 0) {
      idx[d] = flat % shape[d];
      flat /= shape[d];
    }
  }
  return idx;
}

// Element-wise comparison of one key present in both; returns a diff whose status is empty when equal.
Result<TensorDiff> DiffTensor(Source& a, Source& b, const std::string& key, int64_t block_bytes) {
  RowReader ra(&a, key), rb(&b, key);
  TensorDiff d;
  d.key = key;
  if (ra.dtype() != rb.dtype() || ra.canonical_shape() != rb.canonical_shape()) {
    d.status = ra.dtype() != rb.dtype() ? "dtype" : "shape";
    return d;
  }
  const size_t es = DTypeSize(ra.dtype());
  const int64_t row_elems = ra.row_bytes() / int64_t(es);
  bool have_max = false;
  CKPT_RETURN_IF_ERROR(ForEachBlock(ra, 0, ra.canonical_rows(), block_bytes, [&](int64_t r0, int64_t r1, std::span<const std::byte> x) -> Status {
    CKPT_ASSIGN_OR_RETURN(std::span<const std::byte> y, rb.Read(r0, r1));
    d.elements += int64_t(x.size() / es);
    if (x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size()) == 0) return Status::Ok();
    for (size_t i = 0; i < x.size() / es; ++i) {
      if (std::memcmp(x.data() + i * es, y.data() + i * es, es) == 0) continue;
      ++d.differing;
      const double va = ElementAsDouble(ra.dtype(), x.data(), int64_t(i));
      const double vb = ElementAsDouble(rb.dtype(), y.data(), int64_t(i));
      if (std::isfinite(va) && std::isfinite(vb)) d.max_abs = std::max(d.max_abs, std::fabs(va - vb));
      const uint64_t u = UlpDistance(ra.dtype(), x.data() + i * es, y.data() + i * es);
      if (!have_max || u > d.max_ulp) {
        have_max = true;
        d.max_ulp = u;
        d.max_index = Unravel(r0 * row_elems + int64_t(i), ra.canonical_shape());
        d.a_value = va;
        d.b_value = vb;
      }
    }
    return Status::Ok();
  }));
  CKPT_ASSIGN_OR_RETURN(int64_t pa, PaddingNonzero(ra, block_bytes));
  CKPT_ASSIGN_OR_RETURN(int64_t pb, PaddingNonzero(rb, block_bytes));
  if (d.differing > 0) d.status = "differ";
  else if (pa != pb) d.status = "padding";
  return d;
}

}  // namespace

Result<CheckpointDiff> DiffCheckpoints(const std::string& root_a, const std::string& root_b,
                                       const FingerprintOptions& oa, const FingerprintOptions& ob) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Source> a, Open(root_a, oa));
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<Source> b, Open(root_b, ob));
  CheckpointDiff out;
  out.iteration_a = a->manifest.iteration;
  out.iteration_b = b->manifest.iteration;
  std::map<std::string, int> keys;  // bit 1: in a, bit 2: in b
  for (const auto& [k, v] : a->shards_by_key) keys[k] |= 1;
  for (const auto& [k, v] : b->shards_by_key) keys[k] |= 2;
  for (const auto& [key, where] : keys) {
    if (where != 3) {
      TensorDiff d;
      d.key = key;
      d.status = where == 1 ? "only_a" : "only_b";
      out.tensors.push_back(std::move(d));
      continue;
    }
    ++out.tensors_compared;
    CKPT_ASSIGN_OR_RETURN(TensorDiff d, DiffTensor(*a, *b, key, oa.block_bytes));
    if (!d.status.empty()) out.tensors.push_back(std::move(d));
  }
  std::map<std::string, int> objs;  // one-cell objects only: the rest is layout-dependent
  for (const auto& [k, v] : a->objects_by_key)
    if (v.size() == 1 && OneCell(a->manifest.objects[size_t(v[0])])) objs[k] |= 1;
  for (const auto& [k, v] : b->objects_by_key)
    if (v.size() == 1 && OneCell(b->manifest.objects[size_t(v[0])])) objs[k] |= 2;
  for (const auto& [key, where] : objs) {
    if (where != 3) {
      out.objects.push_back({key, where == 1 ? "only_a" : "only_b"});
      continue;
    }
    ++out.objects_compared;
    CKPT_ASSIGN_OR_RETURN(auto xa, ReadObject(*a, a->manifest.objects[size_t(a->objects_by_key[key][0])]));
    CKPT_ASSIGN_OR_RETURN(auto xb, ReadObject(*b, b->manifest.objects[size_t(b->objects_by_key[key][0])]));
    if (xa != xb) out.objects.push_back({key, "differ"});
  }
  return out;
}

}  // namespace ckpt
