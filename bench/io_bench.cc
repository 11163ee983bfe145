// ckpt_io_bench: the load path and the async snapshot, each measured against
// its own machine limit in the same run (issue 19 items 3 and 4). One process,
// LocalComm, no MPI. Prints JSON lines; every row has median, min and max over
// rounds that alternate between the configurations, and the load average.
//
//   ckpt_io_bench load <MiB> <dir> [rounds]
//     saves one state twice (SHA-256 and XXH3-128 chunk hashes, raw chunks),
//     then loads it with each hash, with and without read-ahead, from the page
//     cache ("hot") and after evicting the files from this VM's page cache
//     (POSIX_FADV_DONTNEED: "evicted", which the host may still cache); beside
//     them: pread of the same files (no hash) and each hash per core.
//   ckpt_io_bench async <dir> [rounds]
//     the demo GPT state (tp=1, 1.02 GB): one contiguous memcpy of its byte
//     count, the tensor-by-tensor memcpy, the old per-tensor snapshot buffers,
//     and AsyncSaver's blocking time: first save without and with Reserve, and
//     steady state.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/base/chunk_hash.h"
#include "ckpt/base/clock.h"
#include "ckpt/protocol/async_save.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/workload/gpt_local_state.h"
#include "reshard/megatron_gpt.h"

namespace {

using namespace ckpt;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double LoadAvg() {
  double a = -1;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &a) != 1) a = -1;
    std::fclose(f);
  }
  return a;
}

json Summary(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {{"median", v[v.size() / 2]}, {"min", v.front()}, {"max", v.back()}, {"n", v.size()}};
}

int Fail(const Status& s) {
  std::fprintf(stderr, "ckpt_io_bench: %s\n", s.ToString().c_str());
  return 2;
}

void Print(json j) {
  j["loadavg"] = LoadAvg();
  std::printf("%s\n", j.dump().c_str());
  std::fflush(stdout);
}

// Files of iteration `iter` under root, evicted from this VM's page cache.
void Evict(const std::string& dir) {
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    (void)::fdatasync(fd);
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// pread of every file of `dir` in 4 MiB blocks: the read limit of the same layout.
double PreadSeconds(const std::string& dir) {
  std::vector<char> buf(size_t(4) << 20);
  const auto t0 = Clock::now();
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    off_t off = 0;
    for (ssize_t n; (n = ::pread(fd, buf.data(), buf.size(), off)) > 0;) off += n;
    ::close(fd);
  }
  return Since(t0);
}

// Single-core hash throughput over a 64 MiB buffer (MB/s).
double HashMBps(ChunkHash h) {
  std::vector<std::byte> b(size_t(64) << 20, std::byte{7});
  const auto t0 = Clock::now();
  for (size_t off = 0; off < b.size(); off += size_t(4) << 20)
    (void)ChunkHashHex(h, std::span<const std::byte>(b).subspan(off, size_t(4) << 20));
  return double(b.size()) / 1e6 / Since(t0);
}

struct OwnedTensors {
  std::vector<std::vector<std::byte>> bufs;
  ShardedStateDict sd;
};

OwnedTensors MakeState(int64_t mib) {
  OwnedTensors s;
  const int64_t per = 16;  // tensors
  const int64_t rows = std::max<int64_t>(1, (mib << 20) / per / (1024 * 4));
  uint64_t x = 88172645463325252ull;
  for (int64_t i = 0; i < per; ++i) {
    s.bufs.emplace_back(size_t(rows * 1024 * 4));
    auto* w = reinterpret_cast<uint64_t*>(s.bufs.back().data());
    for (size_t k = 0; k < s.bufs.back().size() / 8; ++k) {  // xorshift: incompressible
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      w[k] = x;
    }
    ShardedTensor t;
    t.key = "t" + std::to_string(i);
    t.dtype = DType::kFloat32;
    t.global_shape = t.local_shape = {rows, 1024};
    t.global_offset = {0, 0};
    s.sd.AddTensor(t, s.bufs.back());
  }
  return s;
}

int Load(int64_t mib, const std::string& root, int rounds) {
  std::filesystem::remove_all(root);
  OwnedTensors s = MakeState(mib);
  const double bytes = double(s.sd.TotalBytes());
  for (ChunkHash h : {ChunkHash::kSha256, ChunkHash::kXxh3_128}) {
    SaveOptions o;
    o.root = root;
    o.iteration = h == ChunkHash::kSha256 ? 1 : 2;
    o.write.hash = h;
    auto r = SaveCheckpoint(s.sd, o);
    if (!r.ok()) return Fail(r.status());
  }
  Print({{"op", "hash_per_core"}, {"sha256_mb_per_s", HashMBps(ChunkHash::kSha256)},
         {"xxh3_128_mb_per_s", HashMBps(ChunkHash::kXxh3_128)}});
  std::map<std::string, std::vector<double>> mbps;
  for (int round = 0; round < rounds; ++round) {
    for (const char* cache : {"hot", "evicted"}) {
      for (int iter : {1, 2}) {
        const std::string dir = root + "/" + IterDirName(iter);
        if (std::string(cache) == "evicted") Evict(dir);
        mbps[std::string("pread_") + cache].push_back(bytes / 1e6 / PreadSeconds(dir));  // same files, no hash
        for (int64_t prefetch : {int64_t(0), int64_t(8) << 20, int64_t(32) << 20}) {
          if (std::string(cache) == "evicted") Evict(dir);
          LoadOptions lo;
          lo.root = root;
          lo.iteration = iter;
          lo.prefetch_bytes = prefetch;
          const auto t0 = Clock::now();
          auto r = LoadCheckpoint(s.sd, lo);
          if (!r.ok()) return Fail(r.status());
          const std::string name = std::string(iter == 1 ? "sha256" : "xxh3-128") + "_" + cache +
                                   (prefetch ? "_readahead" + std::to_string(prefetch >> 20) + "M" : "_serial");
          mbps[name].push_back(bytes / 1e6 / Since(t0));
        }
      }
    }
  }
  for (const auto& [name, v] : mbps) Print({{"op", "load"}, {"config", name}, {"bytes", bytes}, {"mb_per_s", Summary(v)}});
  return 0;
}

// The old snapshot (before the arena): one heap buffer per tensor, memcpy each.
struct PerTensorBuffers {
  std::vector<std::vector<std::byte>> b;
  double Copy(const ShardedStateDict& sd) {
    const auto t0 = Clock::now();
    if (b.size() != sd.tensors().size()) {
      b.clear();
      for (const auto& t : sd.tensors()) b.emplace_back(t.data.size());  // value-initialised: touched
    }
    for (size_t i = 0; i < b.size(); ++i) std::memcpy(b[i].data(), sd.tensors()[i].data.data(), b[i].size());
    return Since(t0);
  }
};

Result<std::vector<double>> AsyncBlocking(const ShardedStateDict& sd, const std::string& root, int saves, bool reserve,
                                          double* reserve_s) {
  LocalComm comm;
  AsyncSaver saver(&comm);
  if (reserve) {
    const auto t0 = Clock::now();
    CKPT_RETURN_IF_ERROR(saver.Reserve(AsyncSaver::ArenaBytes(sd)));
    *reserve_s = Since(t0);
  }
  std::vector<double> out;
  for (int it = 1; it <= saves; ++it) {
    SaveOptions o;
    o.root = root;
    o.iteration = it;
    const auto t0 = Clock::now();
    CKPT_ASSIGN_OR_RETURN(AsyncStartStats st, saver.Start(sd, o));
    out.push_back(Since(t0));
    CKPT_RETURN_IF_ERROR(saver.Wait().status());
  }
  return out;
}

int Async(const std::string& root, int rounds) {
  auto pc = ParallelConfig::Parse("tp=1");
  auto model = reshard::GptPreset("demo");
  if (!pc.ok() || !model.ok()) return Fail(Status::InvalidArgument("bad setup"));
  auto coords = CoordsOf(*pc, 0);
  auto shards = reshard::GptShards(*model, *pc, *coords);
  if (!shards.ok()) return Fail(shards.status());
  auto state = workload::GptLocalState::Create(std::move(shards).value());
  if (!state.ok()) return Fail(state.status());
  if (Status st = state->FillExpected(model->vocab_size); !st.ok()) return Fail(st);
  ShardedStateDict sd = state->StateDict();
  const size_t n = size_t(sd.TotalBytes());
  std::vector<std::byte> src(n, std::byte{1}), dst(n, std::byte{0});
  std::map<std::string, std::vector<double>> s;
  PerTensorBuffers old;
  s["old_per_tensor_first"].push_back(old.Copy(sd));
  for (int round = 0; round < rounds; ++round) {
    const auto t0 = Clock::now();
    std::memcpy(dst.data(), src.data(), n);
    s["contiguous_memcpy"].push_back(Since(t0));
    auto per = MedianStateMemcpySeconds(sd, dst, 1);
    if (!per.ok()) return Fail(per.status());
    s["tensor_by_tensor_memcpy"].push_back(*per);
    s["old_per_tensor_steady"].push_back(old.Copy(sd));
  }
  for (bool reserve : {false, true}) {
    double reserve_s = 0;
    std::filesystem::remove_all(root);
    auto b = AsyncBlocking(sd, root, rounds + 1, reserve, &reserve_s);
    if (!b.ok()) return Fail(b.status());
    s[reserve ? "arena_first_after_reserve" : "arena_first_no_reserve"].push_back(b->front());
    if (reserve) s["arena_reserve_call"].push_back(reserve_s);
    for (size_t i = 1; i < b->size(); ++i) s["arena_steady"].push_back((*b)[i]);
  }
  std::filesystem::remove_all(root);
  const double base = Summary(s["contiguous_memcpy"])["median"];
  for (const auto& [name, v] : s) {
    json j = Summary(v);
    Print({{"op", "async"}, {"what", name}, {"bytes", n}, {"seconds", j},
           {"over_contiguous_memcpy", j["median"].get<double>() / base}});
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "load" && argc >= 4) return Load(std::stoll(argv[2]), argv[3], argc > 4 ? std::stoi(argv[4]) : 5);
  if (mode == "async" && argc >= 3) return Async(argv[2], argc > 3 ? std::stoi(argv[3]) : 5);
  std::fprintf(stderr, "usage: ckpt_io_bench load <MiB> <dir> [rounds] | async <dir> [rounds]\n");
  return 2;
}
