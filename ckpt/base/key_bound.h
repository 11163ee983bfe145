// Bounds on tensor and object keys (docs/FORMAT.md §4): keys become HDF5
// dataset names and are quoted in error messages, so a save refuses, and a
// load's request fails on, a key longer than kMaxKeyBytes, and messages quote
// a key through QuoteKey (a hostile key never makes a message large).
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"

namespace ckpt {

inline constexpr size_t kMaxKeyBytes = 4096;

// `key` for a message: whole up to 200 bytes, else its first 200 bytes and
// "... (<n> bytes)".
std::string QuoteKey(std::string_view key);

// kInvalidArgument naming the first tensor or object key of `state` longer
// than kMaxKeyBytes (quoted briefly); OK if none.
Status ValidateKeyLengths(const ShardedStateDict& state);

}  // namespace ckpt
