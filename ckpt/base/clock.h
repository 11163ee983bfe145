// Elapsed time in seconds, for stats, reports and logs: the one spelling of
// std::chrono::duration<double>(steady_clock::now() - t0).count() (it was
// copied as a local Since() into a dozen files). Deadlines are Millis
// (comm.h, timeout.h), never these doubles. Header-only, pure; thread-safe.
#pragma once

#include <chrono>

namespace ckpt {

// Seconds from t0 to t1 on the steady clock (negative if t1 came first).
inline double SecondsBetween(std::chrono::steady_clock::time_point t0, std::chrono::steady_clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

// Seconds since t0 on the steady clock.
inline double Since(std::chrono::steady_clock::time_point t0) {
  return SecondsBetween(t0, std::chrono::steady_clock::now());
}

}  // namespace ckpt
