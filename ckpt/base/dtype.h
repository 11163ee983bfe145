// Element types of checkpointed tensors, with their on-disk names.
//
// Names ("fp32", "bf16", ...) are part of the format (docs/FORMAT.md).
// Conversion helpers for bf16/fp16 are bit-exact (round-to-nearest-even).
// All functions are pure and thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

#include "ckpt/base/status.h"

namespace ckpt {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kBFloat16,
  kFloat16,
  kInt64,
  kInt32,
  kInt16,
  kInt8,
  kUInt8,
  kBool,
};

inline constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kBFloat16,
                                       DType::kFloat16, DType::kInt64,   DType::kInt32,
                                       DType::kInt16,   DType::kInt8,    DType::kUInt8,
                                       DType::kBool};

size_t DTypeSize(DType t);
std::string_view DTypeName(DType t);
Result<DType> ParseDType(std::string_view name);
bool IsFloating(DType t);

// bf16 <-> fp32, round to nearest even; NaN stays NaN.
inline uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float Bf16ToFloat(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t FloatToFp16(float f);
float Fp16ToFloat(uint16_t h);

// Reads element i of a buffer of dtype t as double (for checks and diffs).
double ElementAsDouble(DType t, const std::byte* data, int64_t i);
// True if element i is NaN or +-Inf (always false for integer types).
bool ElementIsNonFinite(DType t, const std::byte* data, int64_t i);

}  // namespace ckpt

namespace ckpt {
// Index of the first NaN/Inf among n elements, or -1 (always -1 for integers).
int64_t FindNonFinite(DType t, const std::byte* data, int64_t n);
}  // namespace ckpt
