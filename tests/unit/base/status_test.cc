#include <gtest/gtest.h>

#include "ckpt/base/dtype.h"
#include "ckpt/base/status.h"
#include "ckpt/base/status_wire.h"

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

// Built from an OK Status a Result holds kInternal in every build type (it
// was an assert, compiled out in release builds: ok() false, status() OK).
TEST(StatusTest, ResultFromOkStatusIsInternal) {
  Result<int> r = Status::Ok();
  EXPECT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kInternal);
  int v = 7;
  auto use = [&]() -> Status {
    CKPT_ASSIGN_OR_RETURN(v, Result<int>(Status::Ok()));
    return Status::Ok();
  };
  EXPECT_EQ(use().code(), Code::kInternal);
  EXPECT_EQ(v, 7);
}

TEST(StatusTest, OriginIsRecordedOnceAndSurvivesContext) {
  Status s = Status::Corruption("bad chunk").At(3, Phase::kLoad).At(0, Phase::kVote).WithContext("load from '/x'");
  EXPECT_EQ(s.origin_rank(), 3);
  EXPECT_EQ(s.phase(), Phase::kLoad);
  EXPECT_EQ(s.code(), Code::kCorruption);
  EXPECT_TRUE(Status::Ok().At(1, Phase::kLoad).ok());
  EXPECT_FALSE(Status::Ok().At(1, Phase::kLoad).has_origin());
}

TEST(StatusWireTest, TypedFieldsRoundTrip) {
  const Status s(Code::kTimeout, "no answer from rank 2: 'x'\n", 5, Phase::kVote);
  const Status back = DecodeStatus(EncodeStatus(s));
  EXPECT_EQ(back.code(), Code::kTimeout);
  EXPECT_EQ(back.message(), s.message());
  EXPECT_EQ(back.origin_rank(), 5);
  EXPECT_EQ(back.phase(), Phase::kVote);
  const Status none = DecodeStatus(EncodeStatus(Status::IOError("x")));
  EXPECT_FALSE(none.has_origin());
  EXPECT_EQ(none.phase(), Phase::kNone);
}

// A relayed failure keeps its cause's code as a typed field (Status::cause()),
// through context, origin and the wire: Python picks the exception class from
// it, never from the "<CodeName>: " text of the message.
TEST(StatusWireTest, CauseCodeIsATypedFieldOnTheWire) {
  EXPECT_EQ(Status::NotFound("x").cause(), Code::kNotFound);  // its own cause
  const Status relay = Status(Code::kAborted, "rank 0 failed: iteration 2 exists", 0, Phase::kBegin)
                           .WithCause(Code::kAlreadyExists)
                           .WithContext("save iter 2")
                           .At(1, Phase::kPlan);
  EXPECT_EQ(relay.code(), Code::kAborted);
  EXPECT_EQ(relay.cause(), Code::kAlreadyExists);
  EXPECT_EQ(relay.origin_rank(), 0);
  const Status back = DecodeStatus(EncodeStatus(relay));
  EXPECT_EQ(back.code(), Code::kAborted);
  EXPECT_EQ(back.cause(), Code::kAlreadyExists);
  EXPECT_EQ(back.message(), relay.message());
  // A cause is read from the field only: a message that looks like another code stays what the field says.
  const Status text = DecodeStatus(EncodeStatus(Status(Code::kAborted, "NotFound: a message", 1, Phase::kVote)));
  EXPECT_EQ(text.cause(), Code::kAborted);
  // Relayed again as a failed outcome (the agreement's wire, agree.h): the cause survives.
  EXPECT_EQ(DecodeOutcome(EncodeFailure(relay)).status().cause(), Code::kAlreadyExists);
  std::string bad_cause = EncodeStatus(relay);
  bad_cause[2] = char(200);
  EXPECT_EQ(DecodeStatus(bad_cause).code(), Code::kInternal);
  EXPECT_TRUE(Status::Ok().WithCause(Code::kNotFound).ok());
}

TEST(StatusWireTest, CheckedDecodingOfGarbage) {
  std::string wire = EncodeStatus(Status(Code::kIOError, "m", 1, Phase::kWrite));
  for (size_t n = 0; n < 10; ++n) EXPECT_EQ(DecodeStatus(wire.substr(0, n)).code(), Code::kInternal) << n;
  std::string bad_code = wire;
  bad_code[1] = char(200);
  EXPECT_EQ(DecodeStatus(bad_code).code(), Code::kInternal);
  EXPECT_EQ(DecodeStatus("0:").code(), Code::kInternal);  // the old text form is not a status
}

TEST(StatusWireTest, OutcomesCarryPayloadOrTypedFailure) {
  auto ok = DecodeOutcome(EncodeOutcome("payload:x"));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, "payload:x");
  auto err = DecodeOutcome(EncodeFailure(Status(Code::kCorruption, "sha256 mismatch", 2, Phase::kLoad)));
  ASSERT_FALSE(err.ok());
  EXPECT_EQ(err.status().code(), Code::kCorruption);
  EXPECT_EQ(err.status().origin_rank(), 2);
  EXPECT_EQ(DecodeOutcome("").status().code(), Code::kInternal);
  EXPECT_EQ(DecodeOutcome("OKxyz").ok(), true);  // 'O' + payload "Kxyz": any payload is fine
  EXPECT_EQ(DecodeOutcome("ERRInternal: x").status().code(), Code::kInternal);
  EXPECT_EQ(DecodeOutcome("E" + EncodeStatus(Status::Ok())).status().code(), Code::kInternal);
  EXPECT_EQ(DecodeOutcome(EncodeFailure(Status::Ok())).status().code(), Code::kInternal);
}

// Which rank's failure all ranks report: tests/unit/agree_test.cc.

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
