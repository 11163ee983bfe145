// Chunk codec: optional HDF5-compatible byte shuffle + Zstandard.
//
// Encoding matches the HDF5 filter pipeline [shuffle (id 2), zstd (id 32015)]:
// shuffle groups byte k of every element together, then the result is one
// plain zstd frame. Decoding reverses it. Because ckpt compresses chunks itself
// and writes them with HDF5 direct chunk writes, any HDF5 reader with the
// 32015 plugin (ckpt/h5plugin) decodes the same bytes.
//
// The zstd parameters only shape how the frame is found, never what it
// decodes to: any setting yields a standard frame every zstd/32015 reader
// decodes. The default (level 1, hashLog 6) is measured in docs/DESIGN.md
// ("Chunk codec performance") and by `ckpt_bench codec`.
//
// Pure functions; thread-safe. Errors are kCorruption (bad frame, wrong size),
// kInvalidArgument (zstd rejects the level/hash log).
#pragma once

#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

#include "ckpt/base/status.h"

namespace ckpt {

enum class Compression { kNone, kZstd };

std::string_view CompressionName(Compression c);  // "none" | "zstd"
Result<Compression> ParseCompression(std::string_view name);

inline constexpr unsigned kZstdFilterId = 32015;
inline constexpr unsigned kShuffleFilterId = 2;

// ZSTD_c_hashLog of the default: a 64-entry match table. In byte-shuffled
// weights the low bytes are noise and the high bytes a skewed alphabet, so
// matches are rare and short and Huffman-coded literals carry the ratio; a
// tiny table finds the long runs (zeros) and stops wasting time on the rest.
inline constexpr int kZstdWeightsHashLog = 6;
// For the same reason the fast strategy (negative level: zstd's acceleration
// skips ahead between match attempts) with Huffman-coded literals forced on
// (fast levels store literals raw otherwise) keeps the ratio and encodes
// faster (DESIGN.md "Chunk codec performance").
inline constexpr int kZstdWeightsLevel = -50;

struct CodecOptions {
  Compression compression = Compression::kNone;
  bool shuffle = true;  // only with zstd
  // zstd level, also recorded as the filter's cd_values[0] (readers ignore it).
  int zstd_level = kZstdWeightsLevel;
  // ZSTD_c_hashLog (6..30); 0 keeps zstd's own value for the level.
  int zstd_hash_log = kZstdWeightsHashLog;
  // ZSTD_c_literalCompressionMode = Huffman (true) or zstd's choice for the level.
  bool zstd_huffman_literals = true;
};

// kInvalidArgument unless zstd accepts the level and hash log (no-op for kNone).
Status CheckCodecOptions(const CodecOptions& opts);

void ByteShuffle(std::span<const std::byte> in, size_t elem_size, std::span<std::byte> out);
void ByteUnshuffle(std::span<const std::byte> in, size_t elem_size, std::span<std::byte> out);

// raw -> stored bytes. With kNone the output equals the input.
Result<std::vector<std::byte>> EncodeChunk(std::span<const std::byte> raw, size_t elem_size,
                                           const CodecOptions& opts);
// kCorruption unless `stored` is a zstd frame whose header declares exactly
// `raw_size` decoded bytes: lets a reader check a chunk before allocating
// raw_size bytes for it (a hostile manifest may claim any chunk_elems).
Status CheckZstdFrameSize(std::span<const std::byte> stored, uint64_t raw_size);

// stored -> raw; raw_out.size() must be the decoded size exactly.
Status DecodeChunk(std::span<const std::byte> stored, size_t elem_size, Compression compression,
                   bool shuffle, std::span<std::byte> raw_out);

}  // namespace ckpt
