// Read sharing at load (load_share.h), threads as ranks: chunks several ranks
// need are read once, bounded rounds, and every failure path fails the whole
// group at once with the right code.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <thread>

#include "ckpt/base/clock.h"
#include "ckpt/protocol/checkpoint.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;

constexpr int kRanks = 4;

// Saves iteration `iter`: "w" [400, 8] fp32 split over 2 ranks by rows, and "b" [64] replicated.
void SaveTwoRanks(const std::string& root, int64_t iter, Compression c) {
  auto comms = MakeThreadComms(2);
  std::vector<std::thread> threads;
  std::vector<Status> st(2);
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      OwnedState s;
      s.Add(Desc("w", DType::kFloat32, {400, 8}, {200 * r, 0}, {200, 8}), true);
      s.Add(Desc("b", DType::kFloat32, {64}, {0}, {64}, ReplicaId{0, 0, r}), true);
      SaveOptions o;
      o.root = root;
      o.iteration = iter;
      o.comm = comms[r].get();
      o.write.chunk_bytes = 1024;
      o.write.codec.compression = c;
      st[r] = SaveCheckpoint(s.dict(), o).status();
    });
  for (auto& t : threads) t.join();
  for (auto& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
}

struct RankResult {
  Result<LoadStats> stats = Status::Internal("not run");
  int64_t mismatches = -1;
};

// Loads with kRanks thread ranks, every one requesting all of "w" and "b"
// (replicated requests: a DP group), sharing reads over the group;
// `tweak(rank, opts)` adjusts one rank's options.
std::vector<RankResult> LoadShared(const std::string& root, int64_t round_bytes,
                                   const std::function<void(int, LoadOptions&)>& tweak = {}) {
  auto comms = MakeThreadComms(kRanks), shares = MakeThreadComms(kRanks);
  std::vector<RankResult> out(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r)
    threads.emplace_back([&, r] {
      OwnedState s;
      s.Add(Desc("w", DType::kFloat32, {400, 8}, {0, 0}, {400, 8}), false);
      s.Add(Desc("b", DType::kFloat32, {64}, {0}, {64}), false);
      LoadOptions lo;
      lo.root = root;
      lo.comm = comms[r].get();
      lo.share_comm = shares[r].get();
      lo.share_round_bytes = round_bytes;
      lo.threads = 2;
      lo.timeout = Millis(20000);
      if (tweak) tweak(r, lo);
      out[r].stats = LoadCheckpoint(s.dict(), lo);
      out[r].mismatches = s.CountMismatches();
    });
  for (auto& t : threads) t.join();
  return out;
}

int64_t StoredTensorBytes(const std::string& root, int64_t iter) {
  auto m = ReadManifest(DefaultEnv(), root, iter);
  EXPECT_TRUE(m.ok());
  int64_t n = 0;
  for (const auto& s : m.ok() ? m->shards : std::vector<ManifestShard>{})
    for (const auto& c : s.record.chunks) n += int64_t(c.stored_size);
  return m.ok() ? n : -1;
}

class ShareRounds : public ::testing::TestWithParam<std::tuple<Compression, int64_t>> {};

TEST_P(ShareRounds, EveryChunkReadOnceAndEveryElementRight) {
  const auto [comp, round_bytes] = GetParam();
  const std::string root = testing::ScratchDir("load_share");
  SaveTwoRanks(root, 1, comp);
  auto res = LoadShared(root, round_bytes);
  int64_t read = 0, sent = 0, received = 0;
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(res[r].stats.ok()) << "rank " << r << ": " << res[r].stats.status().ToString();
    EXPECT_EQ(res[r].mismatches, 0) << "rank " << r;
    EXPECT_EQ(res[r].stats->elements, 400 * 8 + 64) << "rank " << r;
    read += res[r].stats->bytes_read;
    sent += res[r].stats->bytes_sent;
    received += res[r].stats->bytes_received;
    EXPECT_GT(res[r].stats->bytes_read, 0) << "rank " << r << " read nothing: reads not balanced";
  }
  EXPECT_EQ(read, StoredTensorBytes(root, 1)) << "each stored chunk read exactly once";
  EXPECT_EQ(sent, received);
  EXPECT_EQ(received, int64_t(kRanks - 1) * read);
  if (round_bytes < 1024) {
    EXPECT_GT(res[0].stats->share_rounds, 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, ShareRounds,
                         ::testing::Combine(::testing::Values(Compression::kNone, Compression::kZstd),
                                            ::testing::Values(int64_t(64) << 20, int64_t(1))));

TEST(LoadShare, RankThatCannotPlanFailsTheGroupAtOnce) {
  const std::string root = testing::ScratchDir("load_share_plan");
  SaveTwoRanks(root, 1, Compression::kNone);
  const auto t0 = std::chrono::steady_clock::now();
  auto res = LoadShared(root, 1 << 20, [](int r, LoadOptions& o) {
    if (r == 2) o.iteration = 99;  // no such checkpoint on this rank only
  });
  const double secs = Since(t0);
  EXPECT_LT(secs, 5.0) << "the group waited for a deadline (20 s) instead of hearing the error";
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_FALSE(res[r].stats.ok()) << "rank " << r;
    EXPECT_NE(res[r].stats.status().message().find("iter_0000099"), std::string::npos)
        << "rank " << r << ": " << res[r].stats.status().ToString();
  }
}

TEST(LoadShare, DifferentIterationsInOneGroupRefused) {
  const std::string root = testing::ScratchDir("load_share_iters");
  SaveTwoRanks(root, 1, Compression::kNone);
  SaveTwoRanks(root, 2, Compression::kNone);
  auto res = LoadShared(root, 1 << 20, [](int r, LoadOptions& o) { o.iteration = r == 3 ? 1 : 2; });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_FALSE(res[r].stats.ok()) << "rank " << r;
    EXPECT_NE(res[r].stats.status().message().find("different checkpoints"), std::string::npos)
        << res[r].stats.status().ToString();
  }
}

TEST(LoadShare, DamagedChunkFailsEveryRankAsCorruptionAndFallbackMovesAll) {
  const std::string root = testing::ScratchDir("load_share_damage");
  SaveTwoRanks(root, 1, Compression::kZstd);
  SaveTwoRanks(root, 2, Compression::kZstd);
  auto m = ReadManifest(DefaultEnv(), root, 2);
  ASSERT_TRUE(m.ok());
  const ManifestShard& s = m->shards[0];
  const std::string file = root + "/" + IterDirName(2) + "/" + m->files[s.file].name;
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(s.record.chunks.back().file_offset));
    f.put('\x55');
  }
  auto res = LoadShared(root, 1 << 20);
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_FALSE(res[r].stats.ok()) << "rank " << r;
    const std::string msg = res[r].stats.status().message();
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find("sha256 mismatch"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("shares load reads"), std::string::npos) << "names a relaying rank, not the reader: " << msg;
  }
  auto fb = LoadShared(root, 1 << 20, [](int, LoadOptions& o) { o.fallback = true; });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(fb[r].stats.ok()) << "rank " << r << ": " << fb[r].stats.status().ToString();
    EXPECT_EQ(fb[r].stats->iteration, 1);
    EXPECT_EQ(fb[r].mismatches, 0);
  }
}

}  // namespace
}  // namespace ckpt
