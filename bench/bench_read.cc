// ckpt_bench readverify: the same work as a verified load of raw shard files,
// without HDF5, planning or ckpt: one thread per file (as one rank per file)
// reads it through the page cache in 4 MiB blocks into a reused buffer,
// digests every block with ckpt's own ChunkHashHex (one 4 MiB chunk = one
// digest, the default chunk size) and copies it into memory of the file's
// size, written just before as a load's destination tensors are. dd of the
// same files does only the first step; this shows what the other two cost.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_modes.h"
#include "ckpt/base/chunk_hash.h"
#include "ckpt/base/clock.h"

namespace ckpt::bench {
namespace {

constexpr size_t kBlock = size_t(4) << 20;

// Reads, hashes and lands `path` in `dst` (its size); 0 or the errno.
int ReadVerifyCopy(const std::string& path, ChunkHash hash, std::vector<std::byte>& dst) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  std::vector<std::byte> buf(kBlock);
  size_t off = 0;
  int err = 0;
  while (off < dst.size()) {
    const ssize_t n = ::pread(fd, buf.data(), std::min(kBlock, dst.size() - off), off_t(off));
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    if (ChunkHashHex(hash, std::span<const std::byte>(buf.data(), size_t(n))).empty()) err = EINVAL;
    std::memcpy(dst.data() + off, buf.data(), size_t(n));
    off += size_t(n);
  }
  ::close(fd);
  return err;
}

}  // namespace

int ReadVerifyLimit(const std::string& hash_name, const std::vector<std::string>& files) {
  auto hash = ParseChunkHash(hash_name);
  if (!hash.ok()) {
    std::fprintf(stderr, "ckpt_bench readverify: %s\n", hash.status().ToString().c_str());
    return 2;
  }
  std::vector<std::vector<std::byte>> dst;
  double total = 0;
  for (const std::string& f : files) {
    struct stat st {};
    if (::stat(f.c_str(), &st) != 0) {
      std::fprintf(stderr, "ckpt_bench readverify: %s: %s\n", f.c_str(), std::strerror(errno));
      return 2;
    }
    dst.emplace_back(size_t(st.st_size), std::byte{0x5a});  // written just before, as the load's tensors
    total += double(st.st_size);
  }
  std::vector<int> errs(files.size(), 0);
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < files.size(); ++i)
    ts.emplace_back([&, i] { errs[i] = ReadVerifyCopy(files[i], *hash, dst[i]); });
  for (auto& t : ts) t.join();
  const double secs = Since(t0);
  for (size_t i = 0; i < files.size(); ++i)
    if (errs[i] != 0) {
      std::fprintf(stderr, "ckpt_bench readverify: %s: %s\n", files[i].c_str(), std::strerror(errs[i]));
      return 2;
    }
  std::printf("%s\n", nlohmann::json{{"op", "readverify"}, {"hash", hash_name}, {"readers", files.size()},
                                     {"bytes", total}, {"stored_bytes", total}, {"seconds", secs}}
                          .dump()
                          .c_str());
  return 0;
}

}  // namespace ckpt::bench
