// ckpt_bench codec / shard (bench_modes.h): single-thread chunk codec table
// and pipelined shard-write throughput on bf16 normal(0, 0.02) weights.
// Experimental zstd parameters (literal compression mode) for the table only;
// the codec itself uses the stable API.
#define ZSTD_STATIC_LINKING_ONLY
#include <zstd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_modes.h"
#include "ckpt/base/clock.h"
#include "ckpt/format/codec.h"
#include "ckpt/base/dtype.h"
#include "ckpt/base/sha256.h"
#include "ckpt/format/shard_file.h"

namespace ckpt::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kChunk = 4 << 20;  // ShardWriteOptions::chunk_bytes default

// Best of `reps` timed passes of fn over the whole buffer (after one warm-up pass).
double BestSeconds(int reps, const std::function<void()>& fn) {
  fn();
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = Clock::now();
    fn();
    best = std::min(best, Since(t0));
  }
  return best;
}

// A zstd configuration of the table: CodecOptions when it is ckpt's own path,
// else raw zstd parameters applied after ByteShuffle (same frame format).
struct Config {
  std::string name;
  std::vector<std::pair<ZSTD_cParameter, int>> params;  // empty: use `codec` via EncodeChunk
  CodecOptions codec{Compression::kZstd, true, 1};
  bool is_default = false;
};

std::vector<Config> Configs() {
  const auto L = ZSTD_c_compressionLevel;
  const auto Lit = ZSTD_c_literalCompressionMode;
  const int on = ZSTD_ps_enable;
  std::vector<Config> c;
  c.push_back({"level 1 (zstd params; before)", {}, {Compression::kZstd, true, 1, 0}});
  c.push_back({"level 3", {}, {Compression::kZstd, true, 3, 0}});
  c.push_back({"level -1 (literals raw)", {{L, -1}}});
  c.push_back({"level -5 (literals raw)", {{L, -5}}});
  c.push_back({"level -5 + Huffman literals", {{L, -5}, {Lit, on}}});
  c.push_back({"level -50 + Huffman literals", {{L, -50}, {Lit, on}}});
  c.push_back({"level 1 minMatch 7", {{L, 1}, {ZSTD_c_minMatch, 7}}});
  c.push_back({"level 1 windowLog 17", {{L, 1}, {ZSTD_c_windowLog, 17}}});
  c.push_back({"level 1 hashLog 12", {}, {Compression::kZstd, true, 1, 12}});
  c.push_back({"level 1 hashLog 8", {}, {Compression::kZstd, true, 1, 8}});
  c.push_back({"level 1 hashLog 6 (before)", {}, CodecOptions{Compression::kZstd, true, 1}});
  c.push_back({"level 1 hashLog 6 minMatch 7 windowLog 17", {{L, 1}, {ZSTD_c_hashLog, 6}, {ZSTD_c_minMatch, 7}, {ZSTD_c_windowLog, 17}}});
  c.push_back({"level -50 + Huffman hashLog 6 (default)", {}, CodecOptions{Compression::kZstd}, true});
  c.push_back({"level 3 hashLog 6", {}, {Compression::kZstd, true, 3, 6}});
  return c;
}

std::vector<std::byte> Bf16Normal(size_t bytes, uint32_t seed) {
  std::vector<std::byte> v(bytes);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (size_t i = 0; i + 1 < bytes; i += 2) {
    uint16_t h = FloatToBf16(normal(rng));
    std::memcpy(&v[i], &h, 2);
  }
  return v;
}

// Encodes one chunk with a raw-parameter config: shuffle, then one frame.
std::vector<std::byte> RawEncode(ZSTD_CCtx* cctx, std::span<const std::byte> raw, std::vector<std::byte>& shuf) {
  ByteShuffle(raw, 2, shuf);
  std::vector<std::byte> out(ZSTD_compressBound(raw.size()));
  size_t n = ZSTD_compress2(cctx, out.data(), out.size(), shuf.data(), raw.size());
  if (ZSTD_isError(n)) std::abort();
  out.resize(n);
  return out;
}

nlohmann::json MeasureConfig(const Config& c, const std::vector<std::byte>& data) {
  ZSTD_CCtx* cctx = ZSTD_createCCtx();
  for (const auto& [p, v] : c.params) ZSTD_CCtx_setParameter(cctx, p, v);
  std::vector<std::byte> shuf(kChunk), back(kChunk);
  std::vector<std::vector<std::byte>> frames(data.size() / kChunk);
  auto encode = [&] {
    for (size_t k = 0; k < frames.size(); ++k) {
      auto raw = std::span(data).subspan(k * kChunk, kChunk);
      frames[k] = c.params.empty() ? *EncodeChunk(raw, 2, c.codec) : RawEncode(cctx, raw, shuf);
    }
  };
  const double enc = BestSeconds(3, encode);
  size_t stored = 0;
  for (const auto& f : frames) stored += f.size();
  const double dec = BestSeconds(3, [&] {
    for (const auto& f : frames)
      if (!DecodeChunk(f, 2, Compression::kZstd, true, back).ok()) std::abort();
  });
  ZSTD_freeCCtx(cctx);
  const double n = double(frames.size() * kChunk);
  return {{"op", "codec"}, {"config", c.name}, {"default", c.is_default}, {"ratio", n / double(stored)},
          {"encode_mb_per_s", n / 1e6 / enc}, {"decode_mb_per_s", n / 1e6 / dec}};
}

}  // namespace

int CodecTable(int64_t mib) {
  const std::vector<std::byte> data = Bf16Normal(size_t(mib) << 20, 42);
  std::fprintf(stderr, "bf16 normal(0,0.02), %lld MiB, 4 MiB chunks, byte shuffle, 1 thread, best of 3\n",
               static_cast<long long>(mib));
  std::fprintf(stderr, "| zstd setting | ratio | encode MB/s | decode MB/s |\n|---|---|---|---|\n");
  std::vector<std::byte> tmp(kChunk);
  const double n = double(data.size());
  const double shuf = BestSeconds(3, [&] {
    for (size_t off = 0; off + kChunk <= data.size(); off += kChunk)
      ByteShuffle(std::span(data).subspan(off, kChunk), 2, tmp);
  });
  const double sha = BestSeconds(1, [&] { Sha256Hex(data); });
  for (const Config& c : Configs()) {
    nlohmann::json row = MeasureConfig(c, data);
    std::printf("%s\n", row.dump().c_str());
    std::fprintf(stderr, "| %s | %.3f | %.0f | %.0f |\n", c.name.c_str(), row["ratio"].get<double>(),
                 row["encode_mb_per_s"].get<double>(), row["decode_mb_per_s"].get<double>());
  }
  std::printf("%s\n", nlohmann::json{{"op", "shuffle bf16"}, {"mb_per_s", n / 1e6 / shuf}}.dump().c_str());
  std::printf("%s\n", nlohmann::json{{"op", "sha256"}, {"mb_per_s", n / 1e6 / sha}}.dump().c_str());
  return 0;
}

int Sha256Rate(int64_t mib) {
  const std::vector<std::byte> data = Bf16Normal(size_t(mib) << 20, 3);
  const double secs = BestSeconds(3, [&] {
    for (size_t off = 0; off + kChunk <= data.size(); off += kChunk) Sha256Hex(std::span(data).subspan(off, kChunk));
  });
  const double n = double(data.size() / kChunk * kChunk);
  std::printf("%s\n", nlohmann::json{{"op", "sha256"}, {"bytes", n}, {"seconds", secs}, {"chunk_bytes", kChunk},
                                     {"mb_per_s", n / 1e6 / secs}}.dump().c_str());
  return 0;
}

int ShardWrite(int64_t mib, int threads, const std::string& compression, const std::string& dir) {
  auto comp = ParseCompression(compression);
  if (!comp.ok()) return 2;
  const int64_t cols = 4096, rows = (mib << 20) / (2 * cols);
  std::vector<std::byte> data = Bf16Normal(size_t(rows * cols * 2), 7);
  ShardedTensor t;
  t.key = "w";
  t.dtype = DType::kBFloat16;
  t.global_shape = t.local_shape = {rows, cols};
  t.global_offset = {0, 0};
  ShardWriteOptions o;
  o.codec.compression = *comp;
  o.encode_threads = threads;
  const std::string path = dir + "/shard_" + compression + "_" + std::to_string(threads) + ".h5";
  double best = 1e30;
  ShardWriteStats stats;
  uint64_t size = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    auto w = ShardFileWriter::Create(DefaultEnv(), path, 0);
    if (!w.ok()) return 2;
    auto rec = (*w)->WriteTensor(t, data, o);
    stats = (*w)->stats();
    if (!rec.ok() || !(*w)->Finish().ok()) return 2;
    best = std::min(best, Since(t0));
    size = (*w)->file_size();
  }
  std::printf("%s\n", nlohmann::json{{"op", "shard write"}, {"compression", compression}, {"encode_threads", threads},
                                     {"bytes", data.size()}, {"file_bytes", size}, {"seconds", best},
                                     {"mb_per_s", double(data.size()) / 1e6 / best},
                                     {"peak_chunks_in_flight", stats.peak_chunks_in_flight},
                                     {"peak_buffered_bytes", stats.peak_buffered_bytes}}
                          .dump()
                          .c_str());
  return 0;
}

}  // namespace ckpt::bench
