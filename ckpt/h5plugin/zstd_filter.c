/* HDF5 filter 32015: Zstandard, one plain frame per chunk (see zstd_filter.h).
 * Buffers are malloc/free'd: HDF5 1.10 releases filter buffers with free(). */
#include "zstd_filter.h"

#include <stdlib.h>
#include <zstd.h>

/* Decodes a frame without a recorded content size by streaming into a
 * growing buffer. Returns the decoded size, 0 on failure (*out untouched). */
static size_t decode_streaming(const void* src, size_t nbytes, void** out) {
  size_t cap = nbytes < (1u << 16) ? (1u << 18) : nbytes * 4;
  size_t ret = 0;
  char* dst = (char*)malloc(cap);
  ZSTD_DStream* ds = ZSTD_createDStream();
  ZSTD_inBuffer in = {src, nbytes, 0};
  ZSTD_outBuffer ob = {dst, cap, 0};
  if (!dst || !ds) goto done;
  for (;;) {
    size_t r = ZSTD_decompressStream(ds, &ob, &in);
    if (ZSTD_isError(r)) goto done;
    if (r == 0 && in.pos == in.size) break; /* frame complete, input consumed */
    if (ob.pos == ob.size) {
      char* bigger = (char*)realloc(dst, cap * 2);
      if (!bigger) goto done;
      dst = bigger;
      cap *= 2;
      ob.dst = dst;
      ob.size = cap;
    } else if (in.pos == in.size) {
      goto done; /* truncated frame */
    }
  }
  *out = dst;
  dst = NULL;
  ret = ob.pos;
done:
  free(dst);
  ZSTD_freeDStream(ds);
  return ret;
}

static size_t zstd_decode(size_t nbytes, size_t* buf_size, void** buf) {
  unsigned long long content = ZSTD_getFrameContentSize(*buf, nbytes);
  void* out = NULL;
  size_t n;
  if (content == ZSTD_CONTENTSIZE_ERROR) return 0;
  if (content == ZSTD_CONTENTSIZE_UNKNOWN) {
    n = decode_streaming(*buf, nbytes, &out);
    if (n == 0) return 0;
  } else {
    out = malloc(content ? (size_t)content : 1);
    if (!out) return 0;
    n = ZSTD_decompress(out, (size_t)content, *buf, nbytes);
    if (ZSTD_isError(n) || n != content) {
      free(out);
      return 0;
    }
  }
  free(*buf);
  *buf = out;
  *buf_size = n ? n : 1;
  return n;
}

static size_t zstd_encode(size_t cd_nelmts, const unsigned int cd_values[], size_t nbytes,
                          size_t* buf_size, void** buf) {
  /* cd_values are unsigned: a negative (fast) level arrives two's-complemented. */
  int level = cd_nelmts > 0 ? (int)cd_values[0] : CKPT_ZSTD_DEFAULT_LEVEL;
  size_t bound = ZSTD_compressBound(nbytes);
  void* out;
  size_t n;
  if (level < ZSTD_minCLevel()) level = ZSTD_minCLevel();
  if (level > ZSTD_maxCLevel()) level = ZSTD_maxCLevel();
  out = malloc(bound);
  if (!out) return 0;
  n = ZSTD_compress(out, bound, *buf, nbytes, level);
  if (ZSTD_isError(n)) {
    free(out);
    return 0;
  }
  free(*buf);
  *buf = out;
  *buf_size = bound;
  return n;
}

static size_t zstd_filter(unsigned int flags, size_t cd_nelmts, const unsigned int cd_values[],
                          size_t nbytes, size_t* buf_size, void** buf) {
  if (flags & H5Z_FLAG_REVERSE) return zstd_decode(nbytes, buf_size, buf);
  return zstd_encode(cd_nelmts, cd_values, nbytes, buf_size, buf);
}

static const H5Z_class2_t kZstdFilterClass = {
    H5Z_CLASS_T_VERS,             /* version */
    (H5Z_filter_t)CKPT_ZSTD_FILTER_ID, /* id */
    1,                            /* encoder_present */
    1,                            /* decoder_present */
    "zstd",                       /* name */
    NULL,                         /* can_apply */
    NULL,                         /* set_local */
    zstd_filter,                  /* filter */
};

const H5Z_class2_t* ckpt_zstd_filter_class(void) { return &kZstdFilterClass; }
