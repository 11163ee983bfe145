// Page-aligned byte buffers for direct IO (env.h OpenOptions::direct wants
// chunk bytes at kDirectIoAlign-aligned addresses) and a pool that reuses
// them: a fresh multi-MiB buffer per chunk costs an mmap, a page fault per
// page and an munmap, which on the measured 2-core VM made the workers, not
// the disk, the bottleneck of a direct save (DESIGN "Direct IO").
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

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t capacity);  // uninitialised bytes
  std::byte* data() const { return p_.get(); }
  size_t capacity() const { return capacity_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  struct Free {
    void operator()(std::byte* p) const;
  };
  std::unique_ptr<std::byte[], Free> p_;
  size_t capacity_ = 0;
};

class AlignedBufferPool {
 public:
  explicit AlignedBufferPool(size_t max_idle) : max_idle_(max_idle) {}
  // A buffer of at least n bytes: an idle one that is large enough, else a new one.
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
