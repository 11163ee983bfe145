#include "ckpt/base/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <emmintrin.h>  // SSE2: baseline on x86-64, no runtime dispatch needed
#endif

namespace ckpt {

void StreamCopy(std::byte* dst, const std::byte* src, size_t n) {
#if defined(__x86_64__)
  if (n < kStreamCopyMinBytes) {
    std::memcpy(dst, src, n);
    return;
  }
  // Head: ordinary copy up to a 64-byte aligned destination.
  const size_t head = (64 - (reinterpret_cast<uintptr_t>(dst) & 63)) & 63;
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  // Body: whole cache lines, 4 unaligned loads and 4 streaming stores each.
  const size_t body = n & ~size_t(63);
  for (size_t i = 0; i < body; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), d);
  }
  _mm_sfence();  // streaming stores are weakly ordered: fence before anyone reads
  std::memcpy(dst + body, src + body, n - body);
#else
  std::memcpy(dst, src, n);
#endif
}

}  // namespace ckpt
