// AlignedBuffer / AlignedBufferPool (ckpt/format/aligned_buffers.h): buffers
// are aligned for O_DIRECT (huge-page aligned from 2 MiB), the pool rounds
// sizes up to its bucket so chunks of slightly different sizes reuse one
// buffer, keeps at most max_idle released buffers, and CopyOf copies and
// hashes in one pass.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "ckpt/base/chunk_hash.h"
#include "ckpt/base/env.h"
#include "ckpt/format/aligned_buffers.h"

namespace ckpt {
namespace {

uintptr_t Addr(const AlignedBuffer& b) { return reinterpret_cast<uintptr_t>(b.data()); }

TEST(AlignedBuffer, SmallBuffersArePageAlignedLargeOnesHugePageAligned) {
  AlignedBuffer small(100 << 10), large(size_t(4) << 20);
  EXPECT_EQ(Addr(small) % kDirectIoAlign, 0u);
  EXPECT_EQ(Addr(large) % (size_t(2) << 20), 0u);
  std::memset(large.data(), 7, large.capacity());  // the whole capacity is usable
  EXPECT_EQ(large.data()[large.capacity() - 1], std::byte(7));
}

TEST(AlignedBufferPool, ChunksOfNearbySizesReuseOneBuffer) {
  AlignedBufferPool pool(4);
  AlignedBuffer a = pool.Acquire(4'096'000);  // an embedding's chunk
  EXPECT_EQ(a.capacity() % AlignedBufferPool::kBucketBytes, 0u);
  EXPECT_GE(a.capacity(), 4'096'000u);
  const std::byte* first = a.data();
  pool.Release(std::move(a));
  AlignedBuffer b = pool.Acquire(4'194'304);  // the next tensor's, slightly larger
  EXPECT_EQ(b.data(), first);
  pool.Release(std::move(b));
  AlignedBuffer c = pool.Acquire(3'846'144);
  EXPECT_EQ(c.data(), first);
  EXPECT_EQ(pool.idle(), 0u);
}

TEST(AlignedBufferPool, KeepsAtMostMaxIdle) {
  AlignedBufferPool pool(2);
  std::vector<AlignedBuffer> held;
  for (int i = 0; i < 4; ++i) held.push_back(pool.Acquire(64 << 10));
  for (auto& b : held) pool.Release(std::move(b));
  EXPECT_EQ(pool.idle(), 2u);
}

TEST(AlignedBufferPool, CopyOfCopiesAndHashesInOnePass) {
  std::vector<std::byte> src((3 << 20) + 12345);
  for (size_t i = 0; i < src.size(); ++i) src[i] = std::byte(i * 131 % 251);
  AlignedBufferPool pool(1);
  ChunkHasher h(ChunkHash::kSha256), want(ChunkHash::kSha256);
  AlignedBuffer b = pool.CopyOf(src, &h);
  EXPECT_EQ(std::memcmp(b.data(), src.data(), src.size()), 0);
  want.Update(src);
  EXPECT_EQ(h.FinishHex(), want.FinishHex());
}

}  // namespace
}  // namespace ckpt
