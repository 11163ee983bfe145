// AlignedBuffer / AlignedBufferPool (aligned_buffers.h).
#include "ckpt/format/aligned_buffers.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "ckpt/base/env.h"

namespace ckpt {

AlignedBuffer::AlignedBuffer(size_t capacity)
    : p_(capacity ? new (std::align_val_t(kDirectIoAlign)) std::byte[capacity] : nullptr), capacity_(capacity) {}

void AlignedBuffer::Free::operator()(std::byte* p) const {
  ::operator delete[](p, std::align_val_t(kDirectIoAlign));
}

AlignedBuffer AlignedBufferPool::Acquire(size_t n) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < idle_.size(); ++i) {
      if (idle_[i].capacity() < n) continue;
      AlignedBuffer b = std::move(idle_[i]);
      idle_.erase(idle_.begin() + std::ptrdiff_t(i));
      return b;
    }
    // None fits (chunk sizes vary by tensor): the oldest idle one makes room
    // for the larger buffer the caller is about to allocate.
    if (!idle_.empty()) idle_.erase(idle_.begin());
  }
  return AlignedBuffer(n);  // allocated outside the lock
}

AlignedBuffer AlignedBufferPool::CopyOf(std::span<const std::byte> src, ChunkHasher* hasher) {
  constexpr size_t kBlock = size_t(256) << 10;
  AlignedBuffer b = Acquire(src.size());
  for (size_t off = 0; off < src.size(); off += kBlock) {
    const size_t n = std::min(kBlock, src.size() - off);
    std::memcpy(b.data() + off, src.data() + off, n);
    if (hasher) hasher->Update({b.data() + off, n});
  }
  return b;
}

void AlignedBufferPool::Release(AlignedBuffer b) {
  if (!b) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(b));
}  // else b is freed here

size_t AlignedBufferPool::idle() const {
  std::lock_guard<std::mutex> lock(mu_);
  return idle_.size();
}

}  // namespace ckpt
