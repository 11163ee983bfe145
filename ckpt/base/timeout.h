// Deadlines as numbers: the one check of a user-given timeout, used by the
// CLI (--timeout-ms), the Python API (timeout=<seconds>) and the library
// entry points (SaveOptions::timeout, LoadOptions::timeout).
//
// Accepted range: 1 ms .. kMaxTimeout (7 days), whole milliseconds. Every wait
// has a deadline (comm.h), so there is no "no deadline": 0, negative, NaN
// and infinite values are refused, as is anything above 7 days (a wait that
// long is a hang). A fraction of a millisecond in seconds-based input is
// rounded to the nearest millisecond before the check. The refusal names
// the input as given, the accepted range and why: kInvalidArgument.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ckpt/base/comm.h"
#include "ckpt/base/status.h"

namespace ckpt {

inline constexpr Millis kMinTimeout{1};
inline constexpr Millis kMaxTimeout{7LL * 24 * 3600 * 1000};  // 7 days

// `what` names the input in the message ("--timeout-ms", "timeout").
Result<Millis> CheckTimeoutMillis(int64_t ms, std::string_view what);
Result<Millis> CheckTimeoutSeconds(double seconds, std::string_view what);
// For a Millis that already is one (library options): the same range.
Status CheckTimeout(Millis t, std::string_view what);

// The accepted range in words, for help texts: "1 .. 604800000 ms (7 days)".
std::string TimeoutRangeText();

}  // namespace ckpt
