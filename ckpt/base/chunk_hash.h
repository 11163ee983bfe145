// ChunkHash: the integrity hash of stored chunks, chosen per checkpoint and
// recorded in its manifest (docs/FORMAT.md, "chunk_hash").
//
// kSha256 (the default): SHA-256 through OpenSSL, 64 lowercase hex digits -
// tamper evidence: nobody can make other bytes with a recorded digest.
// kXxh3_128: XXH3-128 (Debian's libxxhash, seed 0), 32 lowercase hex digits of
// its canonical big-endian form (XXH128_canonicalFromHash) - catches damage
// (flipped bits, torn or swapped chunks) at memory speed (~10x SHA-256 per
// core) but not a deliberate forgery: for trusted storage only.
//
// Pure functions; thread-safe. ChunkHasher: thread-compatible.
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "ckpt/base/status.h"

namespace ckpt {

enum class ChunkHash { kSha256, kXxh3_128 };

std::string_view ChunkHashName(ChunkHash h);  // "sha256", "xxh3-128"
// The inverse of ChunkHashName; anything else: kInvalidArgument naming the
// known algorithms.
Result<ChunkHash> ParseChunkHash(std::string_view name);
// Hex digits of a digest of `h`: 64 (sha256) or 32 (xxh3-128).
size_t ChunkHashHexDigits(ChunkHash h);
// Lowercase hex digest of `data` under `h`.
std::string ChunkHashHex(ChunkHash h, std::span<const std::byte> data);

// Incremental ChunkHashHex for data that arrives in pieces (a chunk read in
// blocks, each hashed while it is still in cache). One object per thread.
class ChunkHasher {
 public:
  explicit ChunkHasher(ChunkHash h);
  ~ChunkHasher();
  ChunkHasher(const ChunkHasher&) = delete;
  ChunkHasher& operator=(const ChunkHasher&) = delete;
  void Reset();  // starts a new digest
  void Update(std::span<const std::byte> data);
  std::string FinishHex();  // then Reset before the next digest

 private:
  ChunkHash hash_;
  void* sha_ = nullptr;  // Sha256 (kSha256)
  void* xxh_ = nullptr;  // XXH3_state_t (kXxh3_128)
};

}  // namespace ckpt
