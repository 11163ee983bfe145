// AlignedBuffer / AlignedBufferPool (aligned_buffers.h).
#include "ckpt/format/aligned_buffers.h"

#include <algorithm>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "ckpt/base/env.h"

namespace ckpt {

namespace {

// Buffers of a huge page or more start on a huge page and are advised to use
// them: on the measured VM a first touch costs a page fault per 4 KiB page,
// and a save's first chunks wait for their buffers' faults.
constexpr size_t kHugePage = size_t(2) << 20;

size_t AlignmentFor(size_t capacity) { return capacity >= kHugePage ? kHugePage : kDirectIoAlign; }

}  // namespace

AlignedBuffer::AlignedBuffer(size_t capacity)
    : p_(capacity ? new (std::align_val_t(AlignmentFor(capacity))) std::byte[capacity] : nullptr,
         AlignedFree{AlignmentFor(capacity)}),
      capacity_(capacity) {
  if (p_ && capacity >= kHugePage) (void)::madvise(p_.get(), capacity / kHugePage * kHugePage, MADV_HUGEPAGE);
}

void AlignedFree::operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t(align)); }

AlignedBuffer AlignedBufferPool::Acquire(size_t n) {
  n = (n + kBucketBytes - 1) / kBucketBytes * kBucketBytes;  // chunk sizes of different tensors share buffers
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
