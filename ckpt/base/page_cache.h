// Page-cache residency of an open file, for choosing direct or buffered reads
// (env.h File::PageCacheShare, DirectRead::kAuto). POSIX edge, like env_posix.cc.
//
// Contract: reads no file data and never fails (-1: unknown, e.g. a
// filesystem that cannot be mapped); the answer is an estimate from a sample
// of pages and may be stale the moment it is returned. Thread-safe (no state).
#pragma once

#include <cstdint>

namespace ckpt {

// Pages sampled at most: kPageCacheWindows windows of kPageCacheWindowPages
// pages, evenly spread (a file of up to their total is probed whole).
inline constexpr uint64_t kPageCacheWindows = 64;
inline constexpr uint64_t kPageCacheWindowPages = 16;

// Share (0..1) of the sampled pages of the first `size` bytes of `fd` that are
// in the page cache (mincore over a PROT_READ mapping); 0 for an empty file.
double SampledPageCacheShare(int fd, uint64_t size);

}  // namespace ckpt
