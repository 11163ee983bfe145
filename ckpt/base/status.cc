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
    case Code::kOutcomeUnknown: return "OutcomeUnknown";
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
  Status out = *this;  // every typed field kept (origin, cause, missing peers)
  out.message_ = std::string(context) + ": " + message_;
  return out;
}

Status Status::At(int rank, Phase phase) const {
  if (ok() || has_origin()) return *this;
  Status out = *this;
  out.origin_rank_ = rank;
  out.phase_ = phase;
  return out;
}

Status Status::WithCause(Code cause) const {
  if (ok()) return *this;
  Status out = *this;
  out.cause_ = cause;
  return out;
}

const MissingPeers& Status::missing() const {
  static const MissingPeers kNone;
  return missing_ ? *missing_ : kNone;
}

Status Status::WithMissing(MissingPeers peers) const {
  if (ok()) return *this;
  Status out = *this;
  out.missing_ = peers.empty() ? nullptr : std::make_shared<const MissingPeers>(std::move(peers));
  return out;
}

std::string MissingPeers::Describe() const {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const std::string host = i < hosts.size() && !hosts[i].empty() ? hosts[i] : "?";
    s += (s.empty() ? "rank " : ", rank ") + std::to_string(ranks[i]) + " on host '" + host + "'";
  }
  return s;
}

Status OkStatusInResult() {
  return Status::Internal("a Result was built from an OK status (a bug: it holds no value)");
}

}  // namespace ckpt
