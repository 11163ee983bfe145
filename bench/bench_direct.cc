// ckpt_bench dio: the direct-IO limit of this machine for the same bytes and
// writers as a ckpt save/load (bench_modes.h DirectIoLimit). dd O_DIRECT
// copies through a buffer of 4 KiB pages; on the measured VM a direct write or
// read costs per page it pins, so a writer whose buffer sits on huge pages (as
// ckpt's chunk buffers do) is 2-6x faster than dd: this is that writer, with
// no hashing, no HDF5 and no copy, so nothing does the same IO faster.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_modes.h"
#include "ckpt/base/clock.h"

namespace ckpt::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kBlock = size_t(4) << 20, kHuge = size_t(2) << 20;

struct Buffer {
  explicit Buffer(bool huge) : align(huge ? kHuge : 4096), p(new (std::align_val_t(align)) std::byte[kBlock]) {
    if (huge) (void)::madvise(p, kBlock, MADV_HUGEPAGE);
    std::memset(p, 0x5a, kBlock);
  }
  ~Buffer() { ::operator delete[](p, std::align_val_t(align)); }
  size_t align;
  std::byte* p;
};

// Writes (O_DIRECT pwrites of 4 MiB, then fdatasync) or reads back (O_DIRECT
// preads) `bytes` of `path`; 0, or the errno of the first failure.
int Run(const std::string& path, uint64_t bytes, bool write, Buffer& b) {
  const int fd = ::open(path.c_str(), write ? (O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT) : (O_RDONLY | O_DIRECT), 0644);
  if (fd < 0) return errno ? errno : EIO;
  bool ok = true;
  for (uint64_t off = 0; ok && off < bytes; off += kBlock) {
    const size_t n = size_t(std::min<uint64_t>(kBlock, (bytes - off + 4095) / 4096 * 4096));
    ok = write ? ::pwrite(fd, b.p, n, off_t(off)) == ssize_t(n) : ::pread(fd, b.p, n, off_t(off)) > 0;
  }
  if (ok && write) ok = ::fdatasync(fd) == 0;
  const int err = ok ? 0 : (errno ? errno : EIO);
  ::close(fd);
  return err;
}

}  // namespace

int DirectIoLimit(const std::string& dir, int writers, int64_t bytes_each, bool huge) {
  std::vector<std::unique_ptr<Buffer>> bufs;
  for (int w = 0; w < writers; ++w) bufs.push_back(std::make_unique<Buffer>(huge));
  double secs[2] = {0, 0};
  int err = 0;
  for (int phase = 0; phase < 2 && err == 0; ++phase) {  // write, then read the files back (not in the page cache)
    std::vector<std::thread> ts;
    std::vector<int> errs(size_t(writers), 0);
    const auto t0 = Clock::now();
    for (int w = 0; w < writers; ++w)
      ts.emplace_back([&, w] { errs[size_t(w)] = Run(dir + "/dio_" + std::to_string(w), uint64_t(bytes_each), phase == 0, *bufs[size_t(w)]); });
    for (auto& t : ts) t.join();
    secs[phase] = Since(t0);
    for (int e : errs) err = err ? err : e;
  }
  for (int w = 0; w < writers; ++w) ::unlink((dir + "/dio_" + std::to_string(w)).c_str());
  if (err != 0) {
    std::fprintf(stderr, "ckpt_bench dio: O_DIRECT IO failed in %s: %s\n", dir.c_str(), std::strerror(err));
    return 2;
  }
  const double total = double(bytes_each) * writers;
  for (int phase = 0; phase < 2; ++phase)
    std::printf("%s\n", nlohmann::json{{"op", phase == 0 ? "dio write" : "dio read"}, {"huge_pages", huge},
                                       {"writers", writers}, {"bytes", total}, {"stored_bytes", total},
                                       {"seconds", secs[phase]}}.dump().c_str());
  return 0;
}

}  // namespace ckpt::bench
