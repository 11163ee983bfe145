// Deterministic expected tensor contents, checkable from any shard.
//
// The value of an element is a function of (key, the element's row-major
// index in the global tensor) only, so whatever box or flat range a rank
// saves or loads, under whatever layout, it can compute what it should hold.
// Float values are +-(1 + m/128) * 2^-e (m < 128, e <= 8): never zero and
// exactly representable in fp32, fp64, bf16 and fp16, so round trips are
// bit-exact in every float dtype. Integer dtypes get small integers, bool 0/1.
//
// Vocabulary padding: for tensors with allow_shape_mismatch, when valid_rows
// >= 0, elements whose axis-0 global coordinate is >= valid_rows (padding
// rows beyond vocab_size) are expected to be zero - saved as zero, and a load
// into a larger padded shape must zero-fill them. With one fixed trailing
// shape the global index of a real row does not depend on the padding.
//
// Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "ckpt/base/dtype.h"
#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"

namespace ckpt::workload {

inline constexpr int64_t kNoPadding = -1;

// The value for element `global_index` of tensor `key` (before padding rules).
double ExpectedValue(std::string_view key, int64_t global_index, DType dtype);

// Writes the expected contents of shard `t` (its box, narrowed to its flat
// range) into `out`, which must be t.num_bytes() long.
Status FillExpected(const ShardedTensor& t, std::span<std::byte> out,
                    int64_t valid_rows = kNoPadding);

// Number of elements of `data` (laid out as shard `t`) that differ bitwise
// from the expected contents; *first_bad_index (if non-null) gets the flat
// position in `data` of the first one, or -1.
Result<int64_t> CountMismatches(const ShardedTensor& t, std::span<const std::byte> data,
                                int64_t* first_bad_index, int64_t valid_rows = kNoPadding);

}  // namespace ckpt::workload
