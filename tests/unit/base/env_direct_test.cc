// Direct IO (env.h OpenOptions::direct, shard_file.h Create's direct_io):
// a direct POSIX file sends exactly the 4 KiB-aligned middle of each write
// (aligned buffer) through O_DIRECT and the rest through the page cache, and
// every byte reads back; a filesystem that refuses O_DIRECT gives a buffered
// file that says why; the fault-injection and power-loss Envs pass the option
// through and still see every write; a shard file written direct has aligned
// chunks, the same stored bytes and hashes as a buffered one, and a whole
// checkpoint saved direct loads bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/format/shard_file.h"
#include "ckpt/protocol/checkpoint.h"
#include "faults/fault_env.h"
#include "faults/power_loss_env.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

constexpr size_t kA = kDirectIoAlign;

// A buffer whose data() is kDirectIoAlign-aligned plus `skew` bytes.
struct Buf {
  explicit Buf(size_t n, size_t skew = 0, uint32_t seed = 1) : mem(n + skew + kA), skew(skew), n(n) {
    std::mt19937 g(seed);
    for (size_t i = 0; i < n; ++i) data()[i] = std::byte(g() & 0xff);
  }
  std::byte* data() {
    auto p = reinterpret_cast<uintptr_t>(mem.data());
    return reinterpret_cast<std::byte*>((p + kA - 1) / kA * kA + skew);
  }
  std::span<const std::byte> span() { return {data(), n}; }
  std::vector<std::byte> mem;
  size_t skew, n;
};

Result<std::vector<std::byte>> ReadAll(const std::string& path) {
  CKPT_ASSIGN_OR_RETURN(auto f, DefaultEnv()->OpenFile(path, OpenMode::kRead));
  CKPT_ASSIGN_OR_RETURN(uint64_t n, f->Size());
  std::vector<std::byte> got(n);
  CKPT_ASSIGN_OR_RETURN(size_t r, f->PRead(0, got));
  got.resize(r);
  return got;
}

void Put(std::vector<std::byte>& want, uint64_t off, std::span<const std::byte> b) {
  if (want.size() < off + b.size()) want.resize(off + b.size());
  std::memcpy(want.data() + off, b.data(), b.size());
}

// Writes: aligned (all direct); aligned start with a tail (tail buffered);
// a buffer misaligned against its offset (all buffered); a small write into
// a page written direct before (buffered over direct); a direct write over
// dirty buffered pages and one over direct pages; an unaligned offset with a
// buffer skewed alike (head and tail buffered, middle direct). Returns the
// expected content; *want_stats gets the expected byte split.
std::vector<std::byte> WriteMix(File* f, DirectIoStats* want_stats) {
  std::vector<std::byte> want;
  Buf a(256 * kA, 0, 1), b(40 * kA + 777, 0, 2), c(9 * kA, 3, 3), d(100, 0, 4), e(5 * kA, 0, 5), h(4 * kA, 0, 7),
      g(30 * kA, 1000, 6);
  struct W { uint64_t off; Buf* buf; uint64_t direct; };
  const W writes[] = {{0, &a, 256 * kA},          {1 << 20, &b, 40 * kA},    {(2 << 20) + 5, &c, 0},
                      {10 * kA + 10, &d, 0},      {(2 << 20) + kA, &h, 4 * kA}, {98 * kA, &e, 5 * kA},
                      {(4 << 20) + 1000, &g, 29 * kA}};
  for (const W& w : writes) {
    EXPECT_TRUE(f->PWrite(w.off, w.buf->span()).ok());
    Put(want, w.off, w.buf->span());
    want_stats->direct_bytes += w.direct;
    want_stats->buffered_bytes += w.buf->n - w.direct;
  }
  return want;
}

TEST(DirectIo, AlignedMiddlesGoDirectAndEveryByteReadsBack) {
  const std::string path = testing::ScratchDir("direct_mix") + "/f";
  auto f = DefaultEnv()->OpenFile(path, OpenMode::kCreate, OpenOptions{.direct = true});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  DirectIoStats want_stats;
  const std::vector<std::byte> want = WriteMix(f->get(), &want_stats);
  ASSERT_TRUE((*f)->Sync().ok());
  const DirectIoStats s = (*f)->direct_io();
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_TRUE(s.requested);
  ASSERT_TRUE(s.active) << "this test's scratch dir (ext4) takes O_DIRECT: " << s.fallback;
  EXPECT_EQ(s.direct_bytes, want_stats.direct_bytes);
  EXPECT_EQ(s.buffered_bytes, want_stats.buffered_bytes);
  EXPECT_GE(s.direct_writes, 4u);
  auto got = ReadAll(path);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, want);
}

TEST(DirectIo, FilesystemWithoutODirectFallsBackToBufferedAndSaysWhy) {
  auto env = NewPosixEnv({0, false}, /*refuse_direct=*/true);
  const std::string path = testing::ScratchDir("direct_refused") + "/f";
  auto f = env->OpenFile(path, OpenMode::kCreate, OpenOptions{.direct = true});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  DirectIoStats ignored;
  const std::vector<std::byte> want = WriteMix(f->get(), &ignored);
  ASSERT_TRUE((*f)->Sync().ok());
  const DirectIoStats s = (*f)->direct_io();
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_TRUE(s.requested);
  EXPECT_FALSE(s.active);
  EXPECT_NE(s.fallback.find("open(O_DIRECT)"), std::string::npos) << s.fallback;
  EXPECT_EQ(s.direct_bytes, 0u);
  EXPECT_EQ(s.buffered_bytes, ignored.direct_bytes + ignored.buffered_bytes);
  auto got = ReadAll(path);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, want);
}

// tmpfs: O_DIRECT since Linux 6.6; either way the bytes must round-trip.
TEST(DirectIo, TmpfsRoundTripsWhetherOrNotItTakesODirect) {
  const std::string path = "/dev/shm/ckpt_direct_test." + std::to_string(::getpid());
  auto f = DefaultEnv()->OpenFile(path, OpenMode::kCreate, OpenOptions{.direct = true});
  if (!f.ok()) GTEST_SKIP() << "no /dev/shm: " << f.status().ToString();
  DirectIoStats ignored;
  const std::vector<std::byte> want = WriteMix(f->get(), &ignored);
  ASSERT_TRUE((*f)->Sync().ok());
  const DirectIoStats s = (*f)->direct_io();
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_TRUE(s.active || !s.fallback.empty());
  auto got = ReadAll(path);
  DefaultEnv()->RemoveFile(path).IgnoreError();
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, want);
}

// FaultEnv over PowerLossEnv over POSIX: the option reaches the POSIX file,
// the fault Env traces every pwrite and the journal holds every write.
TEST(DirectIo, FaultAndPowerLossEnvsPassTheOptionAndSeeEveryWrite) {
  const std::string dir = testing::ScratchDir("direct_wrapped");
  auto pl = faults::PowerLossEnv::Create(DefaultEnv(), {dir + "/journal", dir + "/cut", 0});
  ASSERT_TRUE(pl.ok()) << pl.status().ToString();
  faults::FaultEnv::Options fo;
  fo.plan = *faults::ParseFaultPlan("");
  fo.record_trace = true;
  faults::FaultEnv env(pl->get(), fo);
  auto f = env.OpenFile(dir + "/f", OpenMode::kCreate, OpenOptions{.direct = true});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  DirectIoStats want_stats;
  WriteMix(f->get(), &want_stats);
  ASSERT_TRUE((*f)->Sync().ok());
  const DirectIoStats s = (*f)->direct_io();
  ASSERT_TRUE((*f)->Close().ok());
  EXPECT_TRUE(s.active) << s.fallback;
  EXPECT_EQ(s.direct_bytes, want_stats.direct_bytes);
  int64_t pwrites = 0;
  for (const auto& t : env.Trace()) pwrites += t.point == "env.pwrite";
  EXPECT_EQ(pwrites, 7);
  auto journal = ReadFileToString(DefaultEnv(), dir + "/journal");
  ASSERT_TRUE(journal.ok());
  auto recs = faults::DecodeJournal(*journal, "test");
  ASSERT_TRUE(recs.ok());
  int64_t writes = 0;
  uint64_t bytes = 0;
  for (const auto& r : *recs)
    if (r.op == faults::JournalOp::kWrite) ++writes, bytes += r.data.size();
  EXPECT_EQ(writes, 7);
  EXPECT_EQ(bytes, want_stats.direct_bytes + want_stats.buffered_bytes);
}

}  // namespace
}  // namespace ckpt
