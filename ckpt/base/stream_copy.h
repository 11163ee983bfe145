// StreamCopy: memcpy for large copies whose destination is not read again
// soon (the async-save snapshot arena), with non-temporal stores.
//
// Why: glibc's memcpy switches to non-temporal stores only above
// x86_non_temporal_threshold (3/4 of the shared cache: 133 MB on the bench
// VM), so copying a state tensor by tensor (8-64 MB each) uses ordinary
// stores, which first read every destination line (read-for-ownership): ~1.5x
// the memory traffic of one large contiguous memcpy of the same bytes.
//
// Contract: same as memcpy (non-overlapping ranges, any alignment, any n);
// copies below kStreamCopyMinBytes, and on non-x86-64 builds, are plain
// memcpy. Thread-safe (no state). On return the stores are ordered (sfence):
// another thread that synchronises with this one afterwards sees the bytes.
#pragma once

#include <cstddef>

namespace ckpt {

inline constexpr size_t kStreamCopyMinBytes = size_t(256) << 10;

void StreamCopy(std::byte* dst, const std::byte* src, size_t n);

}  // namespace ckpt
