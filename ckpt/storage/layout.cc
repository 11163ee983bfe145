#include "ckpt/storage/layout.h"

#include <algorithm>
#include <cstdio>

namespace ckpt {
namespace {

// Control and non-ASCII bytes as \xNN: file contents never reach a terminal raw.
std::string EscapeForMessage(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out;
}

bool AllDigits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

}  // namespace

std::string IterDirName(int64_t iteration) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "iter_%07lld", static_cast<long long>(iteration));
  return buf;
}

std::string TmpIterDirName(int64_t iteration, const std::string& nonce) {
  return "." + IterDirName(iteration) + ".tmp-" + nonce;
}

Result<int64_t> ParseIterDirName(std::string_view name) {
  constexpr std::string_view kPrefix = "iter_";
  if (name.substr(0, kPrefix.size()) != kPrefix || name.size() == kPrefix.size())
    return Status::InvalidArgument("not an iteration directory: " + std::string(name));
  int64_t v = 0;
  for (char c : name.substr(kPrefix.size())) {
    if (c < '0' || c > '9') return Status::InvalidArgument("not an iteration directory: " + std::string(name));
    v = v * 10 + (c - '0');
  }
  return v;
}

bool IsTmpIterDirName(std::string_view name) {
  return name.substr(0, 6) == ".iter_" && name.find(".tmp-") != std::string_view::npos;
}

Result<int64_t> ParseTrackerText(const std::string& path, std::string_view v) {
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ' || v.back() == '\r')) v.remove_suffix(1);
  if (v.empty()) return Status::Corruption("checkpoint tracker '" + path + "' is empty");
  if (!AllDigits(v) || v.size() > 18)
    return Status::Corruption("checkpoint tracker '" + path + "' does not hold an iteration number: '" +
                              EscapeForMessage(v.substr(0, 40)) + "'" + (v.size() > 40 ? "..." : ""));
  return std::stoll(std::string(v));
}

}  // namespace ckpt
