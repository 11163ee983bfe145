// Status and Result<T>: the one error model of ckpt.
//
// Contract: every fallible function returns Status or [[nodiscard]] Result<T>.
// errno is converted to a Status exactly once, at the OS edge (env_posix.cc),
// with the path and operation in the message. Messages name the file, tensor,
// rank and phase where the caller knows them (callers prepend context with
// Status::WithContext). Status is a value type; thread-compatible.
//
// A failure that crosses ranks carries typed fields besides code and message:
// the rank that hit it first (origin_rank, -1 when not recorded) and the
// protocol phase it happened in, and the code of the failure it relays
// (cause(): a rank that aborts because rank r failed with kAlreadyExists is
// kAborted with cause kAlreadyExists). Decisions (fallback, exit codes, which
// rank's failure to report) look at these fields, never at message text.
// The one wire form is in status_wire.h.
//
// A deadline failure (kTimeout raised by a Comm) also carries the peers it
// waited for in vain, typed (MissingPeers: ranks, their hosts, the phase), so
// a report or a test judges who was lost by these, never by message text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "ckpt/base/phase.h"

namespace ckpt {

enum class Code {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kCorruption,
  kIOError,
  kNoSpace,
  kTimeout,
  kAborted,
  kFailedPrecondition,
  kUnimplemented,
  kInternal,
  // A commit whose outcome this rank cannot know: the iteration may or may
  // not be committed durably (e.g. rank 0 stopped between the directory
  // rename and the fsync that makes it durable). Neither "committed" nor
  // "nothing happened": the caller must look (load/verify) before retrying.
  kOutcomeUnknown,
};
// The highest Code (wire decoders check the range against it).
inline constexpr Code kLastCode = Code::kOutcomeUnknown;

std::string_view CodeName(Code code);

// The peers a deadline failure waited for in vain: ranks (of the
// communicator that timed out), the host each runs on (same length; "" where
// unknown) and the phase of the call. Empty when none is recorded.
struct MissingPeers {
  std::vector<int> ranks;
  std::vector<std::string> hosts;
  Phase phase = Phase::kNone;
  bool empty() const { return ranks.empty(); }
  // "rank 2 on host 'n2', rank 3 on host 'n2'" (for messages).
  std::string Describe() const;
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}
  Status(Code code, std::string message, int origin_rank, Phase phase)
      : code_(code), message_(std::move(message)), origin_rank_(origin_rank), phase_(phase) {}

  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
  static Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
  static Status AlreadyExists(std::string m) { return {Code::kAlreadyExists, std::move(m)}; }
  static Status Corruption(std::string m) { return {Code::kCorruption, std::move(m)}; }
  static Status IOError(std::string m) { return {Code::kIOError, std::move(m)}; }
  static Status NoSpace(std::string m) { return {Code::kNoSpace, std::move(m)}; }
  static Status Timeout(std::string m) { return {Code::kTimeout, std::move(m)}; }
  static Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
  static Status FailedPrecondition(std::string m) { return {Code::kFailedPrecondition, std::move(m)}; }
  static Status Unimplemented(std::string m) { return {Code::kUnimplemented, std::move(m)}; }
  static Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }
  static Status OutcomeUnknown(std::string m) { return {Code::kOutcomeUnknown, std::move(m)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // The rank that hit this failure first (-1: not recorded) and its phase.
  int origin_rank() const { return origin_rank_; }
  Phase phase() const { return phase_; }
  bool has_origin() const { return origin_rank_ >= 0; }
  // The code of the failure this status relays from another rank (an
  // Aborted status keeps its cause's code here); code() when it relays none.
  Code cause() const { return cause_ == Code::kOk ? code_ : cause_; }
  // Returns a copy recording `cause` as the relayed failure's code (OK stays OK).
  Status WithCause(Code cause) const;
  // The peers a deadline failure waited for (empty if not recorded).
  const MissingPeers& missing() const;
  // A copy that records `peers` as the missing peers; OK stays OK.
  Status WithMissing(MissingPeers peers) const;

  // "<CodeName>: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  // The origin fields, the cause and missing peers are kept.
  Status WithContext(std::string_view context) const;

  // Returns a copy that records `rank` and `phase` as the origin unless an
  // origin is already recorded (the first rank to hit a failure stays its
  // origin however often it is relayed); OK stays OK.
  Status At(int rank, Phase phase) const;

  // Explicitly drops a status (for best-effort cleanup paths).
  void IgnoreError() const {}

 private:
  Code code_ = Code::kOk;
  std::string message_;
  int origin_rank_ = -1;
  Phase phase_ = Phase::kNone;
  Code cause_ = Code::kOk;  // kOk: relays nothing (cause() is code_)
  std::shared_ptr<const MissingPeers> missing_;  // null: none recorded
};

// The Status a Result built from an OK Status holds instead (a caller bug).
Status OkStatusInResult();

// Result<T> holds either a value or a non-OK Status. Built from an OK Status
// (a bug: there is no value) it holds kInternal saying so, in every build
// type, so ok() and status() always agree.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status)  // NOLINT(google-explicit-constructor)
      : v_(status.ok() ? OkStatusInResult() : std::move(status)) {}

  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

#define CKPT_CONCAT_INNER(a, b) a##b
#define CKPT_CONCAT(a, b) CKPT_CONCAT_INNER(a, b)

#define CKPT_RETURN_IF_ERROR(expr)            \
  do {                                        \
    ::ckpt::Status _ckpt_st = (expr);         \
    if (!_ckpt_st.ok()) return _ckpt_st;      \
  } while (0)

#define CKPT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define CKPT_ASSIGN_OR_RETURN(lhs, expr) \
  CKPT_ASSIGN_OR_RETURN_IMPL(CKPT_CONCAT(_ckpt_res_, __LINE__), lhs, expr)

}  // namespace ckpt
