#include "ckpt/base/chunk_hash.h"

#include <xxhash.h>

#include <new>

#include "ckpt/base/sha256.h"

namespace ckpt {

std::string_view ChunkHashName(ChunkHash h) { return h == ChunkHash::kXxh3_128 ? "xxh3-128" : "sha256"; }

Result<ChunkHash> ParseChunkHash(std::string_view name) {
  if (name == "sha256") return ChunkHash::kSha256;
  if (name == "xxh3-128") return ChunkHash::kXxh3_128;
  return Status::InvalidArgument("unknown chunk hash '" + std::string(name) + "' (known: sha256, xxh3-128)");
}

size_t ChunkHashHexDigits(ChunkHash h) { return h == ChunkHash::kXxh3_128 ? 32 : 64; }

static std::string Xxh128Hex(XXH128_hash_t v) {
  XXH128_canonical_t c;
  XXH128_canonicalFromHash(&c, v);
  static const char* kHex = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[size_t(2 * i)] = kHex[c.digest[i] >> 4];
    s[size_t(2 * i + 1)] = kHex[c.digest[i] & 15];
  }
  return s;
}

std::string ChunkHashHex(ChunkHash h, std::span<const std::byte> data) {
  if (h == ChunkHash::kSha256) return Sha256Hex(data);
  return Xxh128Hex(XXH3_128bits(data.data(), data.size()));
}

ChunkHasher::ChunkHasher(ChunkHash h) : hash_(h) { Reset(); }

ChunkHasher::~ChunkHasher() {
  delete static_cast<Sha256*>(sha_);
  if (xxh_) XXH3_freeState(static_cast<XXH3_state_t*>(xxh_));
}

void ChunkHasher::Reset() {
  if (hash_ == ChunkHash::kSha256) {
    delete static_cast<Sha256*>(sha_);
    sha_ = new Sha256;
    return;
  }
  if (!xxh_) xxh_ = XXH3_createState();
  if (!xxh_) throw std::bad_alloc();
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(xxh_));
}

void ChunkHasher::Update(std::span<const std::byte> data) {
  if (hash_ == ChunkHash::kSha256)
    static_cast<Sha256*>(sha_)->Update(data);
  else
    XXH3_128bits_update(static_cast<XXH3_state_t*>(xxh_), data.data(), data.size());
}

std::string ChunkHasher::FinishHex() {
  if (hash_ == ChunkHash::kSha256) return static_cast<Sha256*>(sha_)->FinishHex();
  return Xxh128Hex(XXH3_128bits_digest(static_cast<XXH3_state_t*>(xxh_)));
}

}  // namespace ckpt
