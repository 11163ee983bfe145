#include <gtest/gtest.h>

#include "ckpt/base/dtype.h"
#include "ckpt/base/status.h"

namespace ckpt {
namespace {

Result<int> Half(int x) {
  if (x % 2) return Status::InvalidArgument("odd");
  return x / 2;
}

Status UseHalf(int x, int* out) {
  CKPT_ASSIGN_OR_RETURN(*out, Half(x));
  return Status::Ok();
}

TEST(StatusTest, ResultPropagates) {
  int v = 0;
  EXPECT_TRUE(UseHalf(4, &v).ok());
  EXPECT_EQ(v, 2);
  Status s = UseHalf(3, &v);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.WithContext("rank 1").ToString(), "InvalidArgument: rank 1: odd");
}

TEST(DTypeTest, NamesRoundTrip) {
  for (DType t : kAllDTypes) {
    auto parsed = ParseDType(DTypeName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_FALSE(ParseDType("float8").ok());
}

TEST(DTypeTest, HalfConversionsAreExact) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  EXPECT_EQ(FloatToFp16(1.0f), 0x3c00);
  EXPECT_EQ(Fp16ToFloat(0x3c00), 1.0f);
  EXPECT_EQ(FloatToFp16(65504.0f), 0x7bff);
  for (uint32_t h = 0; h < 0x7c00; ++h) EXPECT_EQ(FloatToFp16(Fp16ToFloat(uint16_t(h))), h);
  for (uint32_t h = 0; h < 0x7f80; h += 7) EXPECT_EQ(FloatToBf16(Bf16ToFloat(uint16_t(h))), h);
}

}  // namespace
}  // namespace ckpt
