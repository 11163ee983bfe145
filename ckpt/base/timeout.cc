// CheckTimeoutMillis / CheckTimeoutSeconds: see timeout.h.
#include "ckpt/base/timeout.h"

#include <cmath>
#include <cstdio>

namespace ckpt {
namespace {

Status Refuse(std::string_view what, const std::string& given, std::string_view why) {
  return Status::InvalidArgument(std::string(what) + " " + given + ": " + std::string(why) +
                                 "; a deadline is a whole number of milliseconds in " + TimeoutRangeText() +
                                 " (every collective waits at most that long for a silent rank)");
}

}  // namespace

std::string TimeoutRangeText() {
  return std::to_string(kMinTimeout.count()) + " .. " + std::to_string(kMaxTimeout.count()) + " ms (7 days)";
}

Result<Millis> CheckTimeoutMillis(int64_t ms, std::string_view what) {
  const std::string given = std::to_string(ms) + " ms";
  if (ms < kMinTimeout.count()) return Refuse(what, given, "too short");
  if (ms > kMaxTimeout.count()) return Refuse(what, given, "too long (over 7 days is a hang, not a deadline)");
  return Millis(ms);
}

Result<Millis> CheckTimeoutSeconds(double seconds, std::string_view what) {
  char given[64];
  std::snprintf(given, sizeof given, "%.6g s", seconds);
  if (std::isnan(seconds)) return Refuse(what, given, "not a number");
  if (std::isinf(seconds))
    return Refuse(what, given, seconds > 0 ? "no deadline is not allowed" : "too short");
  const double ms = std::round(seconds * 1000.0);  // finite; compare before converting (no overflow)
  if (ms < double(kMinTimeout.count())) return Refuse(what, given, "too short");
  if (ms > double(kMaxTimeout.count())) return Refuse(what, given, "too long (over 7 days is a hang, not a deadline)");
  return Millis(int64_t(ms));
}

Status CheckTimeout(Millis t, std::string_view what) { return CheckTimeoutMillis(t.count(), what).status(); }

}  // namespace ckpt
