// Expected values: a keyed hash of the global element index, encoded per dtype.
#include "ckpt/workload/expected_values.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace ckpt::workload {
namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t KeyHash(std::string_view key) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (char c : key) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  return SplitMix64(h);
}

double ValueFromHash(uint64_t h, DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return double(h & 1);
    case DType::kUInt8:
      return double(h % 201);
    case DType::kInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
      return double(int64_t(h % 201) - 100);
    default:
      break;
  }
  double mant = 1.0 + double((h >> 1) & 127) / 128.0;
  double v = std::ldexp(mant, -int((h >> 8) % 9));
  return (h & 1) ? -v : v;
}

// Encodes v (exactly representable by construction) as one element of dtype.
void Encode(DType t, double v, std::byte* dst) {
  auto put = [dst](auto x) { std::memcpy(dst, &x, sizeof x); };
  switch (t) {
    case DType::kFloat32:
      put(float(v));
      break;
    case DType::kFloat64:
      put(v);
      break;
    case DType::kBFloat16:
      put(FloatToBf16(float(v)));
      break;
    case DType::kFloat16:
      put(FloatToFp16(float(v)));
      break;
    case DType::kInt64:
      put(int64_t(v));
      break;
    case DType::kInt32:
      put(int32_t(v));
      break;
    case DType::kInt16:
      put(int16_t(v));
      break;
    case DType::kInt8:
      put(int8_t(v));
      break;
    case DType::kUInt8:
      put(uint8_t(v));
      break;
    case DType::kBool:
      put(uint8_t(v != 0));
      break;
  }
}

// A run of consecutive elements: buffer positions [pos, pos+len) hold global
// indices [global, global+len); axis-0 coordinate is row0 + k*row0_step.
struct Run {
  int64_t pos, global, len, row0, row0_step;
};

// Calls f(run) for the shard's elements in buffer order, one run per
// (partial) innermost row of the box that the flat range touches.
template <typename F>
void ForEachRun(const ShardedTensor& t, F&& f) {
  const size_t nd = t.local_shape.size();
  const int64_t n = NumElements(t.local_shape);
  const int64_t begin = t.flat_range ? t.flat_range->begin : 0;
  const int64_t end = t.flat_range ? t.flat_range->end : n;
  if (begin >= end) return;
  if (nd == 0) return f(Run{0, 0, 1, 0, 0});
  const int64_t last = t.local_shape.back();
  std::vector<int64_t> gstride(nd, 1);
  for (size_t d = nd - 1; d-- > 0;) gstride[d] = gstride[d + 1] * t.global_shape[d + 1];
  std::vector<int64_t> idx(nd, 0);
  for (int64_t row = begin / last; row * last < end; ++row) {
    int64_t rest = row;  // unravel the row over the leading axes
    for (size_t d = nd - 1; d-- > 0;) {
      idx[d] = rest % t.local_shape[d];
      rest /= t.local_shape[d];
    }
    int64_t lo = std::max(begin, row * last), hi = std::min(end, (row + 1) * last);
    int64_t col = lo - row * last;
    int64_t g = t.global_offset[nd - 1] + col;
    for (size_t d = 0; d + 1 < nd; ++d) g += (t.global_offset[d] + idx[d]) * gstride[d];
    int64_t row0 = nd == 1 ? t.global_offset[0] + col : t.global_offset[0] + idx[0];
    f(Run{lo - begin, g, hi - lo, row0, nd == 1 ? 1 : 0});
  }
}

Status CheckArgs(const ShardedTensor& t, size_t bytes) {
  CKPT_RETURN_IF_ERROR(t.Validate());
  if (int64_t(bytes) != t.num_bytes())
    return Status::InvalidArgument("tensor '" + t.key + "': buffer has " + std::to_string(bytes) +
                                   " bytes, shard needs " + std::to_string(t.num_bytes()));
  return Status::Ok();
}

// Calls f(pos, encoded expected bytes) for every element of the shard.
template <typename F>
void ForEachExpected(const ShardedTensor& t, int64_t valid_rows, F&& f) {
  const uint64_t kh = KeyHash(t.key);
  const bool padded = t.allow_shape_mismatch && valid_rows >= 0;
  std::byte enc[8];
  ForEachRun(t, [&](const Run& r) {
    for (int64_t k = 0; k < r.len; ++k) {
      bool pad = padded && r.row0 + k * r.row0_step >= valid_rows;
      double v = pad ? 0.0 : ValueFromHash(SplitMix64(kh ^ uint64_t(r.global + k)), t.dtype);
      Encode(t.dtype, v, enc);
      f(r.pos + k, enc);
    }
  });
}

}  // namespace

double ExpectedValue(std::string_view key, int64_t global_index, DType dtype) {
  return ValueFromHash(SplitMix64(KeyHash(key) ^ uint64_t(global_index)), dtype);
}

Status FillExpected(const ShardedTensor& t, std::span<std::byte> out, int64_t valid_rows) {
  CKPT_RETURN_IF_ERROR(CheckArgs(t, out.size()));
  const size_t es = DTypeSize(t.dtype);
  ForEachExpected(t, valid_rows, [&](int64_t pos, const std::byte* enc) {
    std::memcpy(out.data() + pos * es, enc, es);
  });
  return Status::Ok();
}

Result<int64_t> CountMismatches(const ShardedTensor& t, std::span<const std::byte> data,
                                int64_t* first_bad_index, int64_t valid_rows) {
  CKPT_RETURN_IF_ERROR(CheckArgs(t, data.size()));
  const size_t es = DTypeSize(t.dtype);
  int64_t bad = 0, first = -1;
  ForEachExpected(t, valid_rows, [&](int64_t pos, const std::byte* enc) {
    if (std::memcmp(data.data() + pos * es, enc, es) == 0) return;
    if (bad++ == 0) first = pos;
  });
  if (first_bad_index) *first_bad_index = first;
  return bad;
}

}  // namespace ckpt::workload
