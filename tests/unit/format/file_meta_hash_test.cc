// HashOutsideChunks: the metadata hash equals SHA-256 of the gaps between
// chunks, however the reads are grouped, and neighbouring gaps are fetched in
// one read (a save's read-back is a handful of operations, not one per gap).
#include "ckpt/format/file_meta_hash.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>

#include "ckpt/base/sha256.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

// Counts PRead calls on files it opens.
class CountingEnv : public EnvWrapper {
 public:
  CountingEnv() : EnvWrapper(DefaultEnv()) {}
  Result<std::unique_ptr<File>> OpenFile(const std::string& p, OpenMode m, const OpenOptions& o = {}) override {
    CKPT_ASSIGN_OR_RETURN(auto f, target()->OpenFile(p, m, o));
    return std::unique_ptr<File>(new Counted(std::move(f), &reads));
  }
  std::atomic<int> reads{0};

 private:
  class Counted : public File {
   public:
    Counted(std::unique_ptr<File> f, std::atomic<int>* n) : f_(std::move(f)), n_(n) {}
    const std::string& path() const override { return f_->path(); }
    Result<size_t> PRead(uint64_t o, std::span<std::byte> d) override {
      ++*n_;
      return f_->PRead(o, d);
    }
    Status PWrite(uint64_t o, std::span<const std::byte> s) override { return f_->PWrite(o, s); }
    Status Truncate(uint64_t s) override { return f_->Truncate(s); }
    Result<uint64_t> Size() override { return f_->Size(); }
    Status Sync() override { return f_->Sync(); }
    Status Close() override { return f_->Close(); }

   private:
    std::unique_ptr<File> f_;
    std::atomic<int>* n_;
  };
};

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = char(rng());
  return s;
}

std::string NaiveHash(const std::string& bytes, const Ranges& chunks) {
  std::string outside;
  uint64_t at = 0;
  for (const auto& [o, l] : chunks) {
    if (o > at) outside += bytes.substr(at, o - at);
    at = std::max(at, o + l);
  }
  if (at < bytes.size()) outside += bytes.substr(at);
  Sha256 h;
  h.Update(std::as_bytes(std::span(outside.data(), outside.size())));
  return h.FinishHex();
}

struct Fixture {
  std::string path;
  std::string bytes;
};

Fixture Write(const std::string& name, size_t size) {
  Fixture f{testing::ScratchDir("file_meta_hash_" + name) + "/shard.h5", RandomBytes(size, uint32_t(size))};
  EXPECT_TRUE(WriteStringToFileSync(DefaultEnv(), f.path, f.bytes).ok());
  return f;
}

// Small chunks with small gaps (what HDF5 writes for a test-sized shard).
TEST(FileMetaHashTest, ManySmallGapsAreReadOnceAndHashLikeTheirConcatenation) {
  const Fixture f = Write("small", 300000);
  Ranges chunks;
  for (uint64_t o = 800; o + 4096 < f.bytes.size(); o += 4096 + 200) chunks.emplace_back(o, 4096);
  CountingEnv env;
  auto got = HashOutsideChunks(&env, f.path, f.bytes.size(), chunks);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, NaiveHash(f.bytes, chunks));
  EXPECT_EQ(env.reads.load(), 1) << chunks.size() << " gaps";
}

// Chunks larger than the skip limit are not read; a gap larger than one read
// span is read in pieces; every grouping hashes the same bytes.
TEST(FileMetaHashTest, LargeChunksAreSkippedAndLargeGapsSplit) {
  const Fixture f = Write("large", 30 << 20);
  const Ranges chunks = {{1000, 4 << 20}, {(4 << 20) + 2000, 2 << 20}, {(6 << 20) + 2100, 100},
                         {(6 << 20) + 2300, 1 << 20}};  // then a 22 MiB gap to the end
  CountingEnv env;
  auto got = HashOutsideChunks(&env, f.path, f.bytes.size(), chunks);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, NaiveHash(f.bytes, chunks));
  // [0,1000) | [4M+1000,4M+2000) | 2 small gaps joined over a 100-byte chunk | 22 MiB in 3 pieces.
  EXPECT_EQ(env.reads.load(), 1 + 1 + 1 + 3);
}

TEST(FileMetaHashTest, NoChunksHashesTheWholeFileAndShortFilesAreCorruption) {
  const Fixture f = Write("whole", 5000);
  auto whole = HashOutsideChunks(DefaultEnv(), f.path, f.bytes.size(), {});
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, NaiveHash(f.bytes, {}));
  auto longer = HashOutsideChunks(DefaultEnv(), f.path, f.bytes.size() + 10, {{100, 50}});
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.status().code(), Code::kCorruption);
  EXPECT_NE(longer.status().message().find("shard.h5"), std::string::npos) << longer.status().ToString();
}

}  // namespace
}  // namespace ckpt
