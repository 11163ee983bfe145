// Page-aligned byte buffers for direct IO (env.h OpenOptions::direct wants
// chunk bytes at kDirectIoAlign-aligned addresses) and a pool that reuses
// them: a fresh multi-MiB buffer per chunk costs an mmap, a page fault per
// page and an munmap, which on the measured 2-core VM made the workers, not
// the disk, the bottleneck of a direct save (DESIGN "Direct IO"). Buffers of
// 2 MiB or more are 2 MiB-aligned and advised to use huge pages: a first touch
// there costs a fault per huge page instead of one per 4 KiB page.
//
// Thread-safety: AlignedBufferPool is thread-safe (one mutex); a buffer is
// used by one thread at a time. Memory: the pool keeps at most `max_idle`
// released buffers; the rest are freed at once, all of them with the pool.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "ckpt/base/chunk_hash.h"

namespace ckpt {

// AlignedBuffer's deleter: frees with the alignment the buffer was allocated with.
struct AlignedFree {
  size_t align = 0;
  void operator()(std::byte* p) const;
};

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t capacity);  // uninitialised bytes
  std::byte* data() const { return p_.get(); }
  size_t capacity() const { return capacity_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  std::unique_ptr<std::byte[], AlignedFree> p_;
  size_t capacity_ = 0;
};

class AlignedBufferPool {
 public:
  // Buffers are allocated in multiples of this, so that chunks of slightly
  // different sizes (4,096,000 and 4,194,304 bytes, say) reuse each other's.
  static constexpr size_t kBucketBytes = size_t(1) << 20;

  explicit AlignedBufferPool(size_t max_idle) : max_idle_(max_idle) {}
  // A buffer of at least n bytes (rounded up to kBucketBytes): an idle one that
  // is large enough, else a new one.
  AlignedBuffer Acquire(size_t n);
  // An Acquire'd copy of src; with a hasher, each block is hashed right after
  // it is copied (still in cache: one pass over memory instead of two).
  AlignedBuffer CopyOf(std::span<const std::byte> src, ChunkHasher* hasher);
  // Returns a buffer for reuse (freed if max_idle are idle already).
  void Release(AlignedBuffer b);
  size_t idle() const;

 private:
  const size_t max_idle_;
  mutable std::mutex mu_;
  std::vector<AlignedBuffer> idle_;
};

}  // namespace ckpt
