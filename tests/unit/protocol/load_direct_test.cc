// Direct reads (env.h OpenOptions::direct on a kRead file, ChunkReader and
// LoadOptions::direct_io): a read sends exactly its 4 KiB-aligned middle
// (aligned buffer) through O_DIRECT, the rest through the page cache, and
// returns the bytes a buffered read returns - dirty cached pages and EOF
// included; a filesystem that refuses O_DIRECT reads buffered and says why;
// checkpoints with packed (unaligned) and aligned chunk offsets, raw and zstd,
// load bit for bit with direct reads, leave nothing in the page cache's
// accounting of read bytes, and a flipped byte is still named by its chunk.
// DirectRead::kAuto: File::PageCacheShare follows what is cached, and a load
// reads a cold file direct and a cached one through the page cache.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "ckpt/base/env.h"
#include "faults/fault_env.h"
#include "ckpt/format/manifest.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/verify.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

constexpr size_t kA = kDirectIoAlign;
constexpr size_t kFileBytes = (size_t(3) << 20) + 777;  // ends off the alignment

// `n` bytes at an address kDirectIoAlign-aligned plus `skew`.
struct Buf {
  explicit Buf(size_t n, size_t skew = 0) : mem(n + skew + kA), n(n), skew(skew) {}
  std::span<std::byte> span() {
    auto p = reinterpret_cast<uintptr_t>(mem.data());
    return {reinterpret_cast<std::byte*>((p + kA - 1) / kA * kA + skew), n};
  }
  std::vector<std::byte> mem;
  size_t n, skew;
};

std::vector<std::byte> RandomBytes(size_t n, uint32_t seed) {
  std::vector<std::byte> v(n);
  std::mt19937 g(seed);
  for (auto& b : v) b = std::byte(g() & 0xff);
  return v;
}

// A synced file of random bytes, then 64 KiB at 1 MiB overwritten and not
// synced: those pages are dirty in the page cache when the direct reads run.
std::vector<std::byte> WriteFileWithDirtyPages(const std::string& path) {
  std::vector<std::byte> want = RandomBytes(kFileBytes, 1);
  auto f = DefaultEnv()->OpenFile(path, OpenMode::kCreate);
  EXPECT_TRUE(f.ok() && (*f)->PWrite(0, want).ok() && (*f)->Sync().ok());
  const std::vector<std::byte> dirty = RandomBytes(64 << 10, 2);
  EXPECT_TRUE((*f)->PWrite(1 << 20, dirty).ok());
  std::memcpy(want.data() + (1 << 20), dirty.data(), dirty.size());
  EXPECT_TRUE((*f)->Close().ok());
  return want;
}

struct Read {
  uint64_t offset;
  size_t len, skew;
  uint64_t direct;  // bytes expected through O_DIRECT
};

// Aligned (all direct, across the dirty pages); unaligned offset with a buffer
// skewed alike (head and tail buffered); a misaligned buffer (all buffered);
// an aligned read past EOF (direct, short); a read at EOF (nothing).
const Read kReads[] = {{0, size_t(2) << 20, 0, size_t(2) << 20},
                       {3 * kA + 100, 2 * kA + 50, 100, kA},
                       {8 * kA, 64 << 10, 8, 0},
                       {kFileBytes / kA * kA, 2 * kA, 0, kFileBytes % kA},
                       {kFileBytes, kA, 0, 0}};

void CheckReads(File* f, const std::vector<std::byte>& want) {
  for (const Read& r : kReads) {
    Buf b(r.len, r.skew);
    auto n = f->PRead(r.offset, b.span());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    const size_t expect = size_t(std::min<uint64_t>(r.len, kFileBytes - std::min<uint64_t>(r.offset, kFileBytes)));
    ASSERT_EQ(*n, expect) << "read at " << r.offset;
    EXPECT_EQ(std::memcmp(b.span().data(), want.data() + r.offset, expect), 0) << "read at " << r.offset;
  }
}

TEST(DirectRead, AlignedMiddlesReadDirectAndEveryReadMatchesTheFile) {
  const std::string path = testing::ScratchDir("direct_read") + "/f";
  const std::vector<std::byte> want = WriteFileWithDirtyPages(path);
  auto f = DefaultEnv()->OpenFile(path, OpenMode::kRead, OpenOptions{.direct = true});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  CheckReads(f->get(), want);
  const DirectIoStats s = (*f)->direct_io();
  ASSERT_TRUE(s.active) << "this test's scratch dir (ext4) takes O_DIRECT: " << s.fallback;
  uint64_t direct = 0;
  for (const Read& r : kReads) direct += r.direct;
  EXPECT_EQ(s.direct_read_bytes, direct);
  EXPECT_GE(s.direct_reads, 3u);
  EXPECT_EQ(s.direct_bytes, 0u);  // nothing written
}

TEST(DirectRead, FilesystemWithoutODirectReadsBufferedAndSaysWhy) {
  const std::string path = testing::ScratchDir("direct_read_refused") + "/f";
  const std::vector<std::byte> want = WriteFileWithDirtyPages(path);
  auto env = NewPosixEnv({0, false}, /*refuse_direct=*/true);
  auto f = env->OpenFile(path, OpenMode::kRead, OpenOptions{.direct = true});
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  CheckReads(f->get(), want);
  const DirectIoStats s = (*f)->direct_io();
  EXPECT_TRUE(s.requested);
  EXPECT_FALSE(s.active);
  EXPECT_NE(s.fallback.find("reading through the page cache"), std::string::npos) << s.fallback;
  EXPECT_EQ(s.direct_read_bytes, 0u);
}

struct Saved {
  std::string root;
  int64_t state_bytes = 0;
};

// bf16 700x513 (chunks of odd byte counts), fp32 5000, an object; chunks of
// 128 KiB; `direct_save` aligns chunk offsets, packed otherwise.
Saved SaveOne(const std::string& name, bool direct_save, Compression c) {
  Saved s{testing::ScratchDir(name), 700 * 513 * 2 + 5000 * 4};
  testing::OwnedState src;
  src.Add(testing::Desc("w", DType::kBFloat16, {700, 513}, {0, 0}, {700, 513}), true);
  src.Add(testing::Desc("b", DType::kFloat32, {5000}, {0}, {5000}), true);
  src.AddObject({"rng", {1}, {0}, {}}, "rng-state");
  SaveOptions o;
  o.root = s.root;
  o.iteration = 1;
  o.write.chunk_bytes = 128 << 10;
  o.write.direct_io = direct_save;
  o.write.codec.compression = c;
  o.layout = {{"tp", 1}};
  auto saved = SaveCheckpoint(src.dict(), o);
  EXPECT_TRUE(saved.ok()) << saved.status().ToString();
  return s;
}

testing::OwnedState EmptyState() {
  testing::OwnedState dst;
  dst.Add(testing::Desc("w", DType::kBFloat16, {700, 513}, {0, 0}, {700, 513}), false);
  dst.Add(testing::Desc("b", DType::kFloat32, {5000}, {0}, {5000}), false);
  dst.AddObject({"rng", {1}, {0}, {}}, "");
  return dst;
}

// Loads `root` into `dst` reading as `mode` says, with `threads` workers.
Result<LoadStats> LoadWith(const std::string& root, testing::OwnedState& dst, DirectRead mode, int threads) {
  LoadOptions lo;
  lo.root = root;
  lo.direct_io = mode;
  lo.threads = threads;
  return LoadCheckpoint(dst.dict(), lo);
}

TEST(DirectLoad, PackedAlignedAndCompressedCheckpointsLoadBitForBit) {
  const Saved cases[] = {SaveOne("direct_load_packed", false, Compression::kNone),
                         SaveOne("direct_load_aligned", true, Compression::kNone),
                         SaveOne("direct_load_zstd", false, Compression::kZstd)};
  for (const Saved& s : cases) {
    testing::OwnedState dst = EmptyState();
    ASSERT_GT(dst.CountMismatches(), 0);  // control: dst starts as zeros
    auto loaded = LoadWith(s.root, dst, DirectRead::kOn, 2);
    ASSERT_TRUE(loaded.ok()) << s.root << ": " << loaded.status().ToString();
    EXPECT_EQ(dst.CountMismatches(), 0) << s.root;
    EXPECT_EQ(dst.dict().objects()[0].bytes.size(), 9u);
    EXPECT_EQ(loaded->direct_io_fallback, "");
    // Every stored byte came through O_DIRECT (plus the pages around each chunk).
    EXPECT_GE(loaded->direct_read_bytes, loaded->bytes_read) << s.root;
    EXPECT_LT(loaded->direct_read_bytes, loaded->bytes_read + int64_t(loaded->chunks_read * 2 * kA)) << s.root;
  }
}

TEST(DirectLoad, AFlippedByteIsNamedByItsChunk) {
  const Saved s = SaveOne("direct_load_damage", false, Compression::kNone);
  auto m = ReadManifest(DefaultEnv(), s.root, 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ManifestShard* w = nullptr;
  for (const auto& sh : m->shards)
    if (sh.meta.key == "w") w = &sh;
  ASSERT_NE(w, nullptr);
  ASSERT_GE(w->record.chunks.size(), 3u);
  const ChunkRecord& c = w->record.chunks[2];
  const std::string path = JoinPath(JoinPath(s.root, IterDirName(1)), m->files[w->file].name);
  {
    auto f = DefaultEnv()->OpenFile(path, OpenMode::kReadWrite);
    ASSERT_TRUE(f.ok());
    std::byte b[1];
    ASSERT_TRUE((*f)->PRead(c.file_offset + c.stored_size / 2, b).ok());
    b[0] ^= std::byte(0x10);
    ASSERT_TRUE((*f)->PWrite(c.file_offset + c.stored_size / 2, b).ok());
    ASSERT_TRUE((*f)->Sync().ok());
  }
  testing::OwnedState dst = EmptyState();
  auto loaded = LoadWith(s.root, dst, DirectRead::kOn, 2);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), Code::kCorruption) << loaded.status().ToString();
  const std::string msg = loaded.status().ToString();
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("chunk 2"), std::string::npos) << msg;
  EXPECT_NE(msg.find(m->files[w->file].name), std::string::npos) << msg;
  EXPECT_NE(msg.find("mismatch"), std::string::npos) << msg;
}

// Drops the file's clean pages from the page cache (after a Sync every page is clean).
void Evict(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
}

// Reads [0, bytes) of the file through the page cache, without read-ahead
// (POSIX_FADV_RANDOM), so what is cached afterwards is what was read.
void ReadBuffered(const std::string& path, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << path;
  EXPECT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM), 0);
  std::vector<char> buf(1 << 20);
  for (uint64_t off = 0; off < bytes; off += buf.size())
    ASSERT_GT(::pread(fd, buf.data(), size_t(std::min<uint64_t>(buf.size(), bytes - off)), off_t(off)), 0);
  ::close(fd);
}

double ShareOf(Env* env, const std::string& path) {
  auto f = env->OpenFile(path, OpenMode::kRead);
  EXPECT_TRUE(f.ok()) << f.status().ToString();
  return f.ok() ? (*f)->PageCacheShare() : -2;
}

TEST(PageCacheShare, FollowsWhatIsCachedAndDecoratorsForwardIt) {
  const std::string dir = testing::ScratchDir("page_cache_share");
  const std::string path = dir + "/f", empty = dir + "/empty";
  const uint64_t n = uint64_t(24) << 20;  // 6144 pages: sampled, not probed whole
  {
    auto f = DefaultEnv()->OpenFile(path, OpenMode::kCreate);
    ASSERT_TRUE(f.ok() && (*f)->PWrite(0, RandomBytes(size_t(n), 3)).ok() && (*f)->Sync().ok());
    ASSERT_TRUE(DefaultEnv()->OpenFile(empty, OpenMode::kCreate).ok());
  }
  Evict(path);
  EXPECT_LT(ShareOf(DefaultEnv(), path), 0.1);
  ReadBuffered(path, n / 2);
  const double half = ShareOf(DefaultEnv(), path);
  EXPECT_GT(half, 0.3);
  EXPECT_LT(half, 0.7);
  ReadBuffered(path, n);
  EXPECT_GT(ShareOf(DefaultEnv(), path), 0.9);
  faults::FaultEnv fault_env(DefaultEnv(), {});
  EXPECT_GT(ShareOf(&fault_env, path), 0.9);
  EXPECT_EQ(ShareOf(DefaultEnv(), empty), 0.0);
}

TEST(DirectLoad, AutoReadsColdFilesDirectAndCachedFilesThroughTheCache) {
  const Saved s = SaveOne("direct_load_auto", true, Compression::kNone);
  auto m = ReadManifest(DefaultEnv(), s.root, 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  ASSERT_EQ(m->files.size(), 1u);
  const std::string path = JoinPath(JoinPath(s.root, IterDirName(1)), m->files[0].name);
  Evict(path);
  testing::OwnedState cold = EmptyState();
  auto a = LoadWith(s.root, cold, DirectRead::kAuto, 1);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(cold.CountMismatches(), 0);
  EXPECT_EQ(a->files_cached, 0);
  EXPECT_GE(a->direct_read_bytes, a->bytes_read);  // every chunk direct
  ReadBuffered(path, m->files[0].size);
  testing::OwnedState cached = EmptyState();
  auto b = LoadWith(s.root, cached, DirectRead::kAuto, 1);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(cached.CountMismatches(), 0);
  EXPECT_GE(b->files_cached, 1);  // one per reader that opened it
  EXPECT_EQ(b->direct_read_bytes, 0);
}

// ckpt verify reads chunks as loads do; the choice is made before its
// metadata check reads the file through the page cache (whose read-ahead
// would otherwise make an evicted file look cached).
TEST(DirectVerify, AutoReadsColdFilesDirectAndCachedFilesThroughTheCache) {
  const Saved s = SaveOne("direct_verify_auto", true, Compression::kNone);
  auto m = ReadManifest(DefaultEnv(), s.root, 1);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const std::string path = JoinPath(JoinPath(s.root, IterDirName(1)), m->files[0].name);
  VerifyOptions o;
  o.direct_io = DirectRead::kAuto;
  Evict(path);
  auto cold = VerifyCheckpoint(DefaultEnv(), s.root, o);
  ASSERT_TRUE(cold.ok()) << cold.status().ToString();
  EXPECT_TRUE(cold->ok());
  EXPECT_EQ(cold->files_cached, 0);
  EXPECT_GE(cold->direct_read_bytes, cold->bytes_checked);  // every chunk direct
  ReadBuffered(path, m->files[0].size);
  auto cached = VerifyCheckpoint(DefaultEnv(), s.root, o);
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  EXPECT_TRUE(cached->ok());
  EXPECT_EQ(cached->files_cached, 1);
  EXPECT_EQ(cached->direct_read_bytes, 0);
  o.direct_io = DirectRead::kOff;
  Evict(path);
  auto buffered = VerifyCheckpoint(DefaultEnv(), s.root, o);
  ASSERT_TRUE(buffered.ok()) << buffered.status().ToString();
  EXPECT_TRUE(buffered->ok());
  EXPECT_EQ(buffered->direct_read_bytes, 0);
}

}  // namespace
}  // namespace ckpt
