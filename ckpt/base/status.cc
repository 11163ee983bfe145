#include "ckpt/base/status.h"

namespace ckpt {

std::string_view CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "InvalidArgument";
    case Code::kNotFound: return "NotFound";
    case Code::kAlreadyExists: return "AlreadyExists";
    case Code::kCorruption: return "Corruption";
    case Code::kIOError: return "IOError";
    case Code::kNoSpace: return "NoSpace";
    case Code::kTimeout: return "Timeout";
    case Code::kAborted: return "Aborted";
    case Code::kFailedPrecondition: return "FailedPrecondition";
    case Code::kUnimplemented: return "Unimplemented";
    case Code::kInternal: return "Internal";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(CodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string m(context);
  m += ": ";
  m += message_;
  return {code_, std::move(m)};
}

std::string EncodeStatus(const Status& s) {
  return std::to_string(static_cast<int>(s.code())) + ":" + s.message();
}

Status DecodeStatus(std::string_view wire) {
  const size_t colon = wire.find(':');
  int code = -1;
  if (colon != std::string_view::npos && colon >= 1 && colon <= 2) {
    code = 0;
    for (char c : wire.substr(0, colon)) code = (c >= '0' && c <= '9' && code >= 0) ? code * 10 + (c - '0') : -1;
  }
  if (code < 0 || code > static_cast<int>(Code::kInternal))
    return Status::Internal("malformed status on the wire: '" + std::string(wire.substr(0, 80)) + "'");
  if (code == 0) return Status::Ok();
  return {static_cast<Code>(code), std::string(wire.substr(colon + 1))};
}

}  // namespace ckpt
