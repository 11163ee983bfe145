// Status and Result<T>: the one error model of ckpt.
//
// Contract: every fallible function returns Status or [[nodiscard]] Result<T>.
// errno is converted to a Status exactly once, at the OS edge (env_posix.cc),
// with the path and operation in the message. Messages name the file, tensor,
// rank and phase where the caller knows them (callers prepend context with
// Status::WithContext). Status is a value type; thread-compatible.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

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
};

std::string_view CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

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

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // "<CodeName>: <message>", or "OK".
  std::string ToString() const;

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;

  // Explicitly drops a status (for best-effort cleanup paths).
  void IgnoreError() const {}

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

// Result<T> holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : v_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!std::get<Status>(v_).ok() && "Result constructed from OK status");
  }

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

// Wire form of a Status in messages between ranks: "<code number>:<message>"
// ("0:" for OK). DecodeStatus is its inverse; text that is not such a form
// decodes to kInternal naming it (never to OK).
std::string EncodeStatus(const Status& s);
Status DecodeStatus(std::string_view wire);

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
