#include "ckpt/base/dtype.h"

#include <cmath>
#include <string>

namespace ckpt {

size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kBFloat16:
    case DType::kFloat16:
    case DType::kInt16: return 2;
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kBool: return 1;
  }
  return 0;
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kFloat32: return "fp32";
    case DType::kFloat64: return "fp64";
    case DType::kBFloat16: return "bf16";
    case DType::kFloat16: return "fp16";
    case DType::kInt64: return "int64";
    case DType::kInt32: return "int32";
    case DType::kInt16: return "int16";
    case DType::kInt8: return "int8";
    case DType::kUInt8: return "uint8";
    case DType::kBool: return "bool";
  }
  return "?";
}

Result<DType> ParseDType(std::string_view name) {
  for (DType t : kAllDTypes)
    if (DTypeName(t) == name) return t;
  return Status::InvalidArgument("unknown dtype '" + std::string(name) + "'");
}

bool IsFloating(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kBFloat16 ||
         t == DType::kFloat16;
}

uint16_t FloatToFp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return uint16_t(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0));
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {                                 // subnormal or zero
    float a;
    std::memcpy(&a, &absx, 4);
    // scale so the subnormal lands in integer range, round to nearest even
    float scaled = a * 16777216.0f;  // 2^24
    uint32_t m = uint32_t(std::nearbyint(scaled));
    return uint16_t(sign | m);
  }
  uint32_t mant = absx & 0x7fffffu;
  uint32_t exp = (absx >> 23) - 112;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rest = mant & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) h++;
  return uint16_t(sign | h);
}

float Fp16ToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    float v = std::ldexp(float(mant), -24);
    std::memcpy(&out, &v, 4);
    out |= sign;
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

template <typename T>
static T Load(const std::byte* p, int64_t i) {
  T v;
  std::memcpy(&v, p + i * int64_t(sizeof(T)), sizeof(T));
  return v;
}

double ElementAsDouble(DType t, const std::byte* d, int64_t i) {
  switch (t) {
    case DType::kFloat32: return Load<float>(d, i);
    case DType::kFloat64: return Load<double>(d, i);
    case DType::kBFloat16: return Bf16ToFloat(Load<uint16_t>(d, i));
    case DType::kFloat16: return Fp16ToFloat(Load<uint16_t>(d, i));
    case DType::kInt64: return double(Load<int64_t>(d, i));
    case DType::kInt32: return Load<int32_t>(d, i);
    case DType::kInt16: return Load<int16_t>(d, i);
    case DType::kInt8: return Load<int8_t>(d, i);
    case DType::kUInt8:
    case DType::kBool: return Load<uint8_t>(d, i);
  }
  return 0;
}

bool ElementIsNonFinite(DType t, const std::byte* d, int64_t i) {
  if (!IsFloating(t)) return false;
  return !std::isfinite(ElementAsDouble(t, d, i));
}

}  // namespace ckpt

namespace ckpt {

// Exponent-all-ones test on the raw bits: no float conversion in the loop.
template <typename U>
static int64_t FindAllOnesExponent(const std::byte* data, int64_t n, U mask) {
  for (int64_t i = 0; i < n; ++i) {
    U v;
    std::memcpy(&v, data + i * int64_t(sizeof(U)), sizeof(U));
    if ((v & mask) == mask) return i;
  }
  return -1;
}

int64_t FindNonFinite(DType t, const std::byte* data, int64_t n) {
  switch (t) {
    case DType::kFloat32: return FindAllOnesExponent<uint32_t>(data, n, 0x7f800000u);
    case DType::kFloat64: return FindAllOnesExponent<uint64_t>(data, n, 0x7ff0000000000000ull);
    case DType::kBFloat16: return FindAllOnesExponent<uint16_t>(data, n, 0x7f80u);
    case DType::kFloat16: return FindAllOnesExponent<uint16_t>(data, n, 0x7c00u);
    default: return -1;
  }
}

}  // namespace ckpt
