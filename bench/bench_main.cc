// ckpt_bench: baselines and async-save timing for bench/run.sh.
//   ckpt_bench memcpy [MiB]                       memory bandwidth (best of 5)
//   ckpt_bench async <model> <layout> <root> [rounds]   under mpirun: AsyncSaver
//       blocking time vs memcpys of the same bytes taken in alternation
//       with the saves (bench/async_bench.cc)
//   ckpt_bench sha256 [MiB]                       SHA-256 MB/s of one core, 4 MiB chunks
//   ckpt_bench codec [MiB]                        shuffle+zstd settings: ratio,
//       encode/decode MB/s, 1 thread, bf16 normal(0,0.02) (table on stderr)
//   ckpt_bench shard <MiB> <threads> <none|zstd> <dir>   ShardFileWriter MB/s
//       with <threads> encode workers (fsync included)
//   ckpt_bench readverify <sha256|xxh3-128> <file>...   read+hash+copy limit of a
//       verified load, one thread per file (bench_read.cc)
//   ckpt_bench dio <dir> <writers> <bytes each> <huge 0|1>   O_DIRECT write+fdatasync,
//       then read back, from one 4 MiB buffer per writer (bench_direct.cc)
// Each prints JSON lines (rank 0 for async).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_modes.h"
#include "ckpt/base/clock.h"

namespace {

using Clock = std::chrono::steady_clock;

int Memcpy(int64_t mib) {
  const size_t n = size_t(mib) << 20;
  std::vector<std::byte> a(n, std::byte{1}), b(n, std::byte{0});
  double best = 1e9;
  for (int i = 0; i < 5; ++i) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), n);
    best = std::min(best, ckpt::Since(t0));
  }
  std::printf("%s\n", nlohmann::json{{"op", "memcpy"}, {"bytes", n}, {"seconds", best},
                                     {"mb_per_s", double(n) / 1e6 / best}}.dump().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "memcpy") return Memcpy(argc > 2 ? std::stoll(argv[2]) : 1024);
  if (mode == "async" && (argc == 5 || argc == 6))
    return ckpt::bench::AsyncBlocking(argv[2], argv[3], argv[4], argc == 6 ? std::stoi(argv[5]) : 6);
  if (mode == "sha256") return ckpt::bench::Sha256Rate(argc > 2 ? std::stoll(argv[2]) : 256);
  if (mode == "codec") return ckpt::bench::CodecTable(argc > 2 ? std::stoll(argv[2]) : 256);
  if (mode == "dio" && argc == 6)
    return ckpt::bench::DirectIoLimit(argv[2], std::stoi(argv[3]), std::stoll(argv[4]), std::string(argv[5]) == "1");
  if (mode == "readverify" && argc >= 4)
    return ckpt::bench::ReadVerifyLimit(argv[2], std::vector<std::string>(argv + 3, argv + argc));
  if (mode == "shard" && argc == 6) return ckpt::bench::ShardWrite(std::stoll(argv[2]), std::stoi(argv[3]), argv[4], argv[5]);
  std::fprintf(stderr,
               "usage: ckpt_bench memcpy [MiB] | async <model> <layout> <root> [rounds] | codec [MiB] | sha256 [MiB] |\n"
               "       shard <MiB> <threads> <none|zstd> <dir> | dio <dir> <writers> <bytes each> <huge 0|1> |\n"
               "       readverify <sha256|xxh3-128> <file>...\n");
  return 2;
}
