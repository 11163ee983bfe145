// ckpt_bench modes beyond memcpy/async (bench_codec.cc). Each prints JSON
// lines on stdout (and codec a markdown table on stderr); returns the exit code.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ckpt::bench {

// Single-thread shuffle+zstd table on `mib` MiB of bf16 normal(0, 0.02):
// ratio, encode and decode MB/s per zstd setting, plus shuffle and SHA-256 speed.
int CodecTable(int64_t mib);

// SHA-256 of `mib` MiB in 4 MiB chunks (as ckpt hashes chunks), one thread,
// best of 3: the per-core hash limit.
int Sha256Rate(int64_t mib);

// Writes one `mib` MiB bf16 tensor to <dir>/shard_<compression>_<threads>.h5
// with ShardFileWriter and `threads` encode workers, fsync included (best of 3).
int ShardWrite(int64_t mib, int threads, const std::string& compression, const std::string& dir);

// Under mpirun: each rank's GPT state (model spec as `ckpt save --model`,
// layout) saved `rounds` times with AsyncSaver; steady blocking time vs a
// contiguous memcpy of the same bytes taken in alternation with the saves,
// first save vs a first-touch memcpy, a Reserve'd first save (async_bench.cc).
// Rank 0 prints the worst rank's JSON line.
// `writers` threads each write `bytes_each` bytes to <dir>/dio_<w> with 4 MiB
// O_DIRECT pwrites from one buffer (on huge pages with `huge`) and fdatasync,
// then read them back with O_DIRECT: the direct-IO limit (bench_direct.cc).
// Prints {"op": "dio write"|"dio read", bytes, seconds, ...}.
int DirectIoLimit(const std::string& dir, int writers, int64_t bytes_each, bool huge);

// One thread per file: buffered 4 MiB reads, a ChunkHashHex digest (hash_name:
// sha256 | xxh3-128) of every block and a copy into memory of the file's size
// (bench_read.cc). Prints {"op": "readverify", bytes, seconds, ...}.
int ReadVerifyLimit(const std::string& hash_name, const std::vector<std::string>& files);

int AsyncBlocking(const std::string& model, const std::string& layout, const std::string& root, int rounds);

}  // namespace ckpt::bench
