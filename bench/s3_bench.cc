// S3 backend vs a plain upload/download of the same bytes to the same server
// in the same run (issue 32 item 6), and the multipart memory bound.
// Usage: ckpt_s3_bench s3://bucket/prefix MIB [PART_MIB IN_FLIGHT]
// (endpoint and credentials from AWS_*; bench/s3_bench.sh starts the servers).
// Prints one JSON object: MB/s of each path, the ratios, the writer's buffer
// bound and peak, and the process's peak RSS growth.
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "ckpt/base/clock.h"
#include "ckpt/storage/s3/s3_storage.h"

namespace {

using Clock = std::chrono::steady_clock;
long MaxRssKb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}
int Fail(const ckpt::Status& st) {
  std::fprintf(stderr, "ckpt_s3_bench: %s\n", st.ToString().c_str());
  return 2;
}

// Iteration 1's file read back by 4 MiB range reads; seconds taken.
ckpt::Result<double> LoadSecs(ckpt::Storage& storage, size_t bytes) {
  const auto t0 = Clock::now();
  CKPT_ASSIGN_OR_RETURN(auto f, storage.env()->OpenFile(ckpt::JoinPath(storage.root(), "iter_0000001/rank_00000.h5"),
                                                        ckpt::OpenMode::kRead));
  std::vector<std::byte> chunk(4u << 20);
  for (size_t off = 0; off < bytes; off += chunk.size()) CKPT_RETURN_IF_ERROR(f->PRead(off, chunk).status());
  return ckpt::Since(t0);
}
ckpt::s3::S3StorageOptions Options(int argc, char** argv) {
  ckpt::s3::S3StorageOptions o;
  o.upload.part_size = (argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 8) << 20;
  o.upload.max_in_flight = argc > 4 ? std::atoi(argv[4]) : 4;
  o.spool_env = ckpt::DefaultEnv();
  o.spool_dir = "/tmp";
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ckpt;
  if (argc < 3) return Fail(Status::InvalidArgument("usage: ckpt_s3_bench s3://bucket/prefix MIB [PART_MIB IN_FLIGHT]"));
  const std::string url = argv[1];
  const size_t bytes = std::strtoull(argv[2], nullptr, 10) << 20;
  const s3::S3StorageOptions o = Options(argc, argv);
  auto cfg = s3::S3Config::FromEnv();
  if (!cfg.ok()) return Fail(cfg.status());
  auto u = s3::S3Url::Parse(url);
  if (!u.ok()) return Fail(u.status());
  s3::S3Client plain(*cfg);
  if (Status st = plain.CreateBucket(u->bucket); !st.ok()) return Fail(st);
  std::vector<std::byte> data(bytes);
  std::mt19937_64 rng(1);
  for (size_t i = 0; i + 8 <= bytes; i += 8) *reinterpret_cast<uint64_t*>(&data[i]) = rng();
  // Through the backend: stage, write (spool + multipart), publish; load by range reads.
  auto storage = s3::OpenS3Storage(url, *cfg, o);
  if (!storage.ok()) return Fail(storage.status());
  const long rss1 = MaxRssKb();  // the data buffer is already resident
  auto t0 = Clock::now();
  auto staged = (*storage)->Stage(1);
  if (!staged.ok()) return Fail(staged.status());
  {
    auto f = (*storage)->env()->OpenFile(JoinPath((*staged)->dir(), "rank_00000.h5"), OpenMode::kCreate);
    if (!f.ok()) return Fail(f.status());
    if (Status st = (*f)->PWrite(0, data); !st.ok()) return Fail(st);
    if (Status st = (*f)->Close(); !st.ok()) return Fail(st);
  }
  bool published = false;
  if (Status st = (*staged)->Publish("{}", nullptr, &published); !st.ok()) return Fail(st);
  const double save = ckpt::Since(t0);
  const long rss2 = MaxRssKb(), rss0 = rss2;
  auto load = LoadSecs(**storage, bytes);
  if (!load.ok()) return Fail(load.status());
  // Plain: one PUT and one GET of the whole object (after the backend, so
  // the peak RSS growth above is the backend's alone).
  t0 = Clock::now();
  if (Status st = plain.PutObject(u->bucket, u->Key("plain.bin"), data); !st.ok()) return Fail(st);
  const double plain_put = ckpt::Since(t0);
  t0 = Clock::now();
  std::vector<std::byte> got(bytes);  // one GET of the whole object into memory
  if (Status st = plain.GetRange(u->bucket, u->Key("plain.bin"), 0, got); !st.ok()) return Fail(st);
  const double plain_get = ckpt::Since(t0);
  got = {};
  const long rss3 = MaxRssKb();
  (*storage)->DeleteIteration(1).IgnoreError();
  plain.Delete(u->bucket, u->Key("plain.bin")).IgnoreError();
  const double mb = bytes / 1e6;
  std::printf(
      "{\"bytes\": %zu, \"plain_put_MBps\": %.1f, \"plain_get_MBps\": %.1f, \"save_MBps\": %.1f, "
      "\"load_MBps\": %.1f, \"save_over_plain_put\": %.2f, \"load_over_plain_get\": %.2f, "
      "\"part_bytes\": %zu, \"parts_in_flight\": %d, \"buffer_bound_bytes\": %zu, "
      "\"save_rss_growth_kb\": %ld, \"plain_rss_growth_kb\": %ld}\n",
      bytes, mb / plain_put, mb / plain_get, mb / save, mb / *load, (mb / save) / (mb / plain_put),
      (mb / *load) / (mb / plain_get), o.upload.part_size, o.upload.max_in_flight,
      o.upload.part_size * (o.upload.max_in_flight + 2), rss2 - rss1, rss3 - rss0);
  return 0;
}
