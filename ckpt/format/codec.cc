// Chunk codec: HDF5-compatible byte shuffle + one plain zstd frame per chunk.
//
// Shuffle follows H5Zshuffle.c exactly: with n = size / elem_size whole
// elements, byte k of element j goes to out[k * n + j]; the size % elem_size
// trailing bytes are copied unchanged to the end; with elem_size <= 1 or
// n <= 1 the output equals the input. elem_size 2 and 4 (bf16/fp16/fp32, the
// bulk of a checkpoint) get SSE2 kernels; everything else a plain loop.
//
// zstd contexts are cached per thread, with their parameters (level, hashLog)
// set again only when they change, so a chunk costs no context creation or
// parameter setup; ZSTD_compress2 emits one single frame with the content size,
// as ZSTD_compress does. The shuffle scratch buffer is cached per thread too,
// so steady-state encoding does not touch the allocator except for the
// returned vector.
#include "ckpt/format/codec.h"

// ZSTD_c_literalCompressionMode is in the experimental section (stable since 1.4.x;
// Debian 12 ships 1.5.4): a parameter id passed to ZSTD_CCtx_setParameter.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <cassert>
#include <cstring>
#include <memory>
#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ckpt {
namespace {

// ---- shuffle kernels --------------------------------------------------------

#if defined(__SSE2__)
// Splits 32 interleaved bytes (a, b) into their even and odd bytes.
inline void Deinterleave2(__m128i a, __m128i b, __m128i* even, __m128i* odd) {
  const __m128i lo = _mm_set1_epi16(0x00ff);
  *even = _mm_packus_epi16(_mm_and_si128(a, lo), _mm_and_si128(b, lo));
  *odd = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));
}
#endif

// Shuffles n whole elements of 2 bytes: out = [byte0 of all | byte1 of all].
void Shuffle2(const uint8_t* in, size_t n, uint8_t* out) {
  uint8_t* d0 = out;
  uint8_t* d1 = out + n;
  size_t j = 0;
#if defined(__SSE2__)
  for (; j + 16 <= n; j += 16) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * j));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * j + 16));
    __m128i e, o;
    Deinterleave2(a, b, &e, &o);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d0 + j), e);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d1 + j), o);
  }
#endif
  for (; j < n; ++j) {
    d0[j] = in[2 * j];
    d1[j] = in[2 * j + 1];
  }
}

void Unshuffle2(const uint8_t* in, size_t n, uint8_t* out) {
  const uint8_t* s0 = in;
  const uint8_t* s1 = in + n;
  size_t j = 0;
#if defined(__SSE2__)
  for (; j + 16 <= n; j += 16) {
    __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s0 + j));
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s1 + j));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * j), _mm_unpacklo_epi8(a, b));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * j + 16), _mm_unpackhi_epi8(a, b));
  }
#endif
  for (; j < n; ++j) {
    out[2 * j] = s0[j];
    out[2 * j + 1] = s1[j];
  }
}

// 4-byte elements: two rounds of the 2-way split (bytes {0,2}/{1,3}, then each half).
void Shuffle4(const uint8_t* in, size_t n, uint8_t* out) {
  uint8_t* d[4] = {out, out + n, out + 2 * n, out + 3 * n};
  size_t j = 0;
#if defined(__SSE2__)
  for (; j + 16 <= n; j += 16) {
    const __m128i* p = reinterpret_cast<const __m128i*>(in + 4 * j);
    __m128i e1, o1, e2, o2, b0, b1, b2, b3;
    Deinterleave2(_mm_loadu_si128(p), _mm_loadu_si128(p + 1), &e1, &o1);
    Deinterleave2(_mm_loadu_si128(p + 2), _mm_loadu_si128(p + 3), &e2, &o2);
    Deinterleave2(e1, e2, &b0, &b2);
    Deinterleave2(o1, o2, &b1, &b3);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d[0] + j), b0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d[1] + j), b1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d[2] + j), b2);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d[3] + j), b3);
  }
#endif
  for (; j < n; ++j)
    for (size_t k = 0; k < 4; ++k) d[k][j] = in[4 * j + k];
}

void Unshuffle4(const uint8_t* in, size_t n, uint8_t* out) {
  const uint8_t* s[4] = {in, in + n, in + 2 * n, in + 3 * n};
  size_t j = 0;
#if defined(__SSE2__)
  for (; j + 16 <= n; j += 16) {
    __m128i b0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s[0] + j));
    __m128i b1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s[1] + j));
    __m128i b2 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s[2] + j));
    __m128i b3 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s[3] + j));
    __m128i lo01 = _mm_unpacklo_epi8(b0, b1), hi01 = _mm_unpackhi_epi8(b0, b1);
    __m128i lo23 = _mm_unpacklo_epi8(b2, b3), hi23 = _mm_unpackhi_epi8(b2, b3);
    __m128i* q = reinterpret_cast<__m128i*>(out + 4 * j);
    _mm_storeu_si128(q, _mm_unpacklo_epi16(lo01, lo23));
    _mm_storeu_si128(q + 1, _mm_unpackhi_epi16(lo01, lo23));
    _mm_storeu_si128(q + 2, _mm_unpacklo_epi16(hi01, hi23));
    _mm_storeu_si128(q + 3, _mm_unpackhi_epi16(hi01, hi23));
  }
#endif
  for (; j < n; ++j)
    for (size_t k = 0; k < 4; ++k) out[4 * j + k] = s[k][j];
}

// Any element size: one sequential read stream, es write streams.
void ShuffleGeneric(const uint8_t* in, size_t n, size_t es, uint8_t* out) {
  for (size_t j = 0; j < n; ++j)
    for (size_t k = 0; k < es; ++k) out[k * n + j] = in[j * es + k];
}

void UnshuffleGeneric(const uint8_t* in, size_t n, size_t es, uint8_t* out) {
  for (size_t j = 0; j < n; ++j)
    for (size_t k = 0; k < es; ++k) out[j * es + k] = in[k * n + j];
}

// ---- per-thread zstd state ------------------------------------------------

struct CCtxDeleter {
  void operator()(ZSTD_CCtx* c) const { ZSTD_freeCCtx(c); }
};
struct DCtxDeleter {
  void operator()(ZSTD_DCtx* d) const { ZSTD_freeDCtx(d); }
};

// This thread's compression context, set up for `opts` (kInternal if it
// cannot be allocated, kInvalidArgument if zstd rejects a parameter).
Result<ZSTD_CCtx*> ThreadCCtx(const CodecOptions& opts) {
  thread_local std::unique_ptr<ZSTD_CCtx, CCtxDeleter> ctx(ZSTD_createCCtx());
  thread_local bool configured = false;
  thread_local int level = 0, hash_log = 0;
  thread_local bool huffman = false;
  if (!ctx) return Status::Internal("zstd: cannot allocate a compression context");
  if (configured && level == opts.zstd_level && hash_log == opts.zstd_hash_log &&
      huffman == opts.zstd_huffman_literals)
    return ctx.get();
  configured = false;
  ZSTD_CCtx_reset(ctx.get(), ZSTD_reset_session_and_parameters);
  size_t r = ZSTD_CCtx_setParameter(ctx.get(), ZSTD_c_compressionLevel, opts.zstd_level);
  if (!ZSTD_isError(r) && opts.zstd_hash_log != 0)
    r = ZSTD_CCtx_setParameter(ctx.get(), ZSTD_c_hashLog, opts.zstd_hash_log);
  if (!ZSTD_isError(r) && opts.zstd_huffman_literals)
    r = ZSTD_CCtx_setParameter(ctx.get(), ZSTD_c_literalCompressionMode, ZSTD_ps_enable);
  if (ZSTD_isError(r))
    return Status::InvalidArgument("zstd rejects level " + std::to_string(opts.zstd_level) + " / hash log " +
                                   std::to_string(opts.zstd_hash_log) + ": " + ZSTD_getErrorName(r));
  configured = true;
  level = opts.zstd_level;
  hash_log = opts.zstd_hash_log;
  huffman = opts.zstd_huffman_literals;
  return ctx.get();
}

ZSTD_DCtx* ThreadDCtx() {
  thread_local std::unique_ptr<ZSTD_DCtx, DCtxDeleter> ctx(ZSTD_createDCtx());
  return ctx.get();
}

// Per-thread scratch, uninitialised, growing to the largest size seen by this
// thread. Buffer 0 holds the shuffled image, buffer 1 the zstd output.
std::span<std::byte> ThreadScratch(size_t size, int which = 0) {
  thread_local std::unique_ptr<std::byte[]> buf[2];
  thread_local size_t cap[2] = {0, 0};
  if (cap[which] < size) {
    buf[which].reset(new std::byte[size]);
    cap[which] = size;
  }
  return {buf[which].get(), size};
}

}  // namespace

std::string_view CompressionName(Compression c) {
  switch (c) {
    case Compression::kNone: return "none";
    case Compression::kZstd: return "zstd";
  }
  return "?";
}

Result<Compression> ParseCompression(std::string_view name) {
  if (name == "none") return Compression::kNone;
  if (name == "zstd") return Compression::kZstd;
  return Status::InvalidArgument("unknown compression '" + std::string(name) +
                                 "' (expected \"none\" or \"zstd\")");
}

Status CheckCodecOptions(const CodecOptions& opts) {
  if (opts.compression == Compression::kNone) return Status::Ok();
  if (opts.zstd_level < ZSTD_minCLevel() || opts.zstd_level > ZSTD_maxCLevel())
    return Status::InvalidArgument("zstd level " + std::to_string(opts.zstd_level) + " is outside [" +
                                   std::to_string(ZSTD_minCLevel()) + ", " + std::to_string(ZSTD_maxCLevel()) + "]");
  const ZSTD_bounds b = ZSTD_cParam_getBounds(ZSTD_c_hashLog);
  if (opts.zstd_hash_log != 0 && (opts.zstd_hash_log < b.lowerBound || opts.zstd_hash_log > b.upperBound))
    return Status::InvalidArgument("zstd hash log " + std::to_string(opts.zstd_hash_log) + " is outside [" +
                                   std::to_string(b.lowerBound) + ", " + std::to_string(b.upperBound) +
                                   "] (0: zstd's default)");
  return Status::Ok();
}

namespace {

// Shuffle and unshuffle differ only in the kernels: same fallbacks for one
// element or byte-sized elements, same copy of a trailing partial element.
void Permute(std::span<const std::byte> in, size_t elem_size, std::span<std::byte> out, bool shuffle) {
  assert(out.size() >= in.size());
  const auto* src = reinterpret_cast<const uint8_t*>(in.data());
  auto* dst = reinterpret_cast<uint8_t*>(out.data());
  size_t n = elem_size ? in.size() / elem_size : 0;
  if (elem_size <= 1 || n <= 1) {
    if (!in.empty()) std::memcpy(dst, src, in.size());
    return;
  }
  if (elem_size == 2) shuffle ? Shuffle2(src, n, dst) : Unshuffle2(src, n, dst);
  else if (elem_size == 4) shuffle ? Shuffle4(src, n, dst) : Unshuffle4(src, n, dst);
  else shuffle ? ShuffleGeneric(src, n, elem_size, dst) : UnshuffleGeneric(src, n, elem_size, dst);
  size_t whole = n * elem_size;
  if (whole < in.size()) std::memcpy(dst + whole, src + whole, in.size() - whole);
}

}  // namespace

void ByteShuffle(std::span<const std::byte> in, size_t elem_size, std::span<std::byte> out) {
  Permute(in, elem_size, out, /*shuffle=*/true);
}

void ByteUnshuffle(std::span<const std::byte> in, size_t elem_size, std::span<std::byte> out) {
  Permute(in, elem_size, out, /*shuffle=*/false);
}

Result<std::vector<std::byte>> EncodeChunk(std::span<const std::byte> raw, size_t elem_size,
                                           const CodecOptions& opts) {
  if (opts.compression == Compression::kNone) return std::vector<std::byte>(raw.begin(), raw.end());
  std::span<const std::byte> src = raw;
  if (opts.shuffle) {
    std::span<std::byte> tmp = ThreadScratch(raw.size());
    ByteShuffle(raw, elem_size, tmp);
    src = tmp;
  }
  CKPT_ASSIGN_OR_RETURN(ZSTD_CCtx * cctx, ThreadCCtx(opts));
  // Compress into scratch and return an exact-size copy: no zero-filled
  // compressBound() vector per chunk, and callers hold only the stored bytes.
  std::span<std::byte> out = ThreadScratch(ZSTD_compressBound(src.size()), 1);
  size_t n = ZSTD_compress2(cctx, out.data(), out.size(), src.data(), src.size());
  if (ZSTD_isError(n))
    return Status::Internal("zstd compression (level " + std::to_string(opts.zstd_level) +
                            ") failed: " + ZSTD_getErrorName(n));
  return std::vector<std::byte>(out.begin(), out.begin() + ptrdiff_t(n));
}

Status CheckZstdFrameSize(std::span<const std::byte> stored, uint64_t raw_size) {
  const unsigned long long content = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (content == ZSTD_CONTENTSIZE_ERROR || content == ZSTD_CONTENTSIZE_UNKNOWN)
    return Status::Corruption("zstd chunk of " + std::to_string(stored.size()) +
                              " bytes is not a zstd frame with a recorded size");
  if (content != raw_size)
    return Status::Corruption("zstd chunk decodes to " + std::to_string(content) + " bytes, expected " +
                              std::to_string(raw_size));
  return Status::Ok();
}

Status DecodeChunk(std::span<const std::byte> stored, size_t elem_size, Compression compression,
                   bool shuffle, std::span<std::byte> raw_out) {
  if (compression == Compression::kNone) {
    if (stored.size() != raw_out.size())
      return Status::Corruption("raw chunk has " + std::to_string(stored.size()) +
                                " bytes, expected " + std::to_string(raw_out.size()));
    if (!stored.empty()) std::memcpy(raw_out.data(), stored.data(), stored.size());
    return Status::Ok();
  }
  // Check the frame header first: a wrong size is reported as such, not as a
  // generic "destination too small" from the decoder.
  unsigned long long content = ZSTD_getFrameContentSize(stored.data(), stored.size());
  if (content == ZSTD_CONTENTSIZE_ERROR)
    return Status::Corruption("zstd chunk of " + std::to_string(stored.size()) +
                              " bytes is not a valid zstd frame");
  if (content != ZSTD_CONTENTSIZE_UNKNOWN && content != raw_out.size())
    return Status::Corruption("zstd chunk decodes to " + std::to_string(content) +
                              " bytes, expected " + std::to_string(raw_out.size()));
  std::span<std::byte> dst = shuffle ? ThreadScratch(raw_out.size()) : raw_out;
  ZSTD_DCtx* dctx = ThreadDCtx();
  if (!dctx) return Status::Internal("zstd: cannot allocate a decompression context");
  size_t n = ZSTD_decompressDCtx(dctx, dst.data(), dst.size(), stored.data(), stored.size());
  if (ZSTD_isError(n))
    return Status::Corruption("zstd chunk of " + std::to_string(stored.size()) +
                              " bytes failed to decode: " + ZSTD_getErrorName(n));
  if (n != raw_out.size())
    return Status::Corruption("zstd chunk decoded to " + std::to_string(n) + " bytes, expected " +
                              std::to_string(raw_out.size()));
  if (shuffle) ByteUnshuffle(dst, elem_size, raw_out);
  return Status::Ok();
}

}  // namespace ckpt
