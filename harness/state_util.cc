#include "harness/state_util.h"

#include <algorithm>
#include <cstring>

namespace ckpt::testing {

void ForEachElement(const ShardedTensor& meta, const std::function<void(int64_t, int64_t)>& fn) {
  const size_t nd = meta.local_shape.size();
  const int64_t box = NumElements(meta.local_shape);
  const int64_t begin = meta.flat_range ? meta.flat_range->begin : 0;
  const int64_t end = meta.flat_range ? meta.flat_range->end : box;
  for (int64_t lin = begin; lin < end; ++lin) {
    int64_t rem = lin, global = 0, stride = 1;
    // Decompose lin in the local box (row-major), then linearise in the global shape.
    std::vector<int64_t> idx(nd);
    for (size_t d = nd; d-- > 0;) {
      idx[d] = rem % meta.local_shape[d];
      rem /= meta.local_shape[d];
    }
    for (size_t d = nd; d-- > 0;) {
      global += (idx[d] + meta.global_offset[d]) * stride;
      stride *= meta.global_shape[d];
    }
    fn(lin - begin, global);
  }
}

void PatternValue(const std::string& key, DType dtype, int64_t g, std::byte* out) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: stable across compilers (golden files)
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  int64_t v = int64_t((h + uint64_t(g) * 2654435761u) % 2001) - 1000;  // [-1000, 1000]
  auto put = [&](auto x) { std::memcpy(out, &x, sizeof x); };
  switch (dtype) {
    case DType::kFloat32: put(float(v) / 64.0f); break;
    case DType::kFloat64: put(double(v) / 64.0); break;
    case DType::kBFloat16: put(FloatToBf16(float(v) / 64.0f)); break;
    case DType::kFloat16: put(FloatToFp16(float(v) / 64.0f)); break;
    case DType::kInt64: put(int64_t(v) * 1000003); break;
    case DType::kInt32: put(int32_t(v)); break;
    case DType::kInt16: put(int16_t(v)); break;
    case DType::kInt8: put(int8_t(v % 128)); break;
    case DType::kUInt8: put(uint8_t(v & 0xff)); break;
    case DType::kBool: put(uint8_t(v & 1)); break;
  }
}

void OwnedState::Add(ShardedTensor meta, bool fill) {
  auto buf = std::make_unique<std::vector<std::byte>>(size_t(meta.num_bytes()));
  if (fill) {
    const size_t es = DTypeSize(meta.dtype);
    ForEachElement(meta, [&](int64_t pos, int64_t g) { PatternValue(meta.key, meta.dtype, g, buf->data() + pos * es); });
  }
  dict_.AddTensor(std::move(meta), std::span<std::byte>(*buf));
  buffers_.push_back(std::move(buf));
}

void OwnedState::AddObject(ShardedObject meta, std::string bytes) {
  // No memcpy: an empty blob has b.data() == nullptr, and memcpy(nullptr, .., 0) is UB.
  std::vector<std::byte> b(bytes.size());
  std::transform(bytes.begin(), bytes.end(), b.begin(), [](char c) { return std::byte(c); });
  dict_.AddObject(std::move(meta), std::move(b));
}

int64_t OwnedState::CountMismatches(int64_t valid_rows) const {
  int64_t bad = 0;
  for (const auto& t : dict_.tensors()) {
    const size_t es = DTypeSize(t.meta.dtype);
    const int64_t row = t.meta.global_shape.empty() ? 1 : NumElements(t.meta.global_shape) / std::max<int64_t>(1, t.meta.global_shape[0]);
    ForEachElement(t.meta, [&](int64_t pos, int64_t g) {
      std::byte want[8] = {};
      if (valid_rows < 0 || g / row < valid_rows) PatternValue(t.meta.key, t.meta.dtype, g, want);
      if (std::memcmp(want, t.data.data() + pos * es, es) != 0) ++bad;
    });
  }
  return bad;
}

ShardedTensor Desc(std::string key, DType dtype, Shape global, Shape offset, Shape local, ReplicaId replica,
                   std::optional<FlatRange> flat) {
  ShardedTensor t;
  t.key = std::move(key);
  t.dtype = dtype;
  t.global_shape = std::move(global);
  t.global_offset = std::move(offset);
  t.local_shape = std::move(local);
  t.replica_id = std::move(replica);
  t.flat_range = flat;
  return t;
}

}  // namespace ckpt::testing
