// Save/load/verify round trips and bad-input handling (single process and
// threads as ranks).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/verify.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

using testing::Desc;
using testing::OwnedState;
namespace fs = std::filesystem;

SaveOptions Opts(const std::string& root, int64_t iter, Compression c = Compression::kNone) {
  SaveOptions o;
  o.root = root;
  o.iteration = iter;
  o.write.codec.compression = c;
  o.write.chunk_bytes = 4096;  // many chunks even for small tensors
  o.layout = {{"tp", 1}};
  return o;
}

// A state with every dtype and shape class.
void AddEverything(OwnedState& s, bool fill) {
  for (DType t : kAllDTypes) {
    std::string n(DTypeName(t));
    s.Add(Desc("nd." + n, t, {37, 5, 3}, {0, 0, 0}, {37, 5, 3}), fill);
    s.Add(Desc("vec." + n, t, {1001}, {0}, {1001}), fill);
  }
  s.Add(Desc("empty", DType::kFloat32, {0, 8}, {0, 0}, {0, 8}), fill);
  s.Add(Desc("scalar", DType::kInt64, {}, {}, {}), fill);
}

class RoundTrip : public ::testing::TestWithParam<Compression> {};

TEST_P(RoundTrip, EveryDtypeAndShape) {
  const std::string root = testing::ScratchDir("roundtrip");
  OwnedState src;
  AddEverything(src, true);
  src.AddObject({"rng", {1}, {0}, {}}, std::string("opaque\0state", 12));
  auto saved = SaveCheckpoint(src.dict(), Opts(root, 7, GetParam()));
  ASSERT_TRUE(saved.ok()) << saved.status().ToString();

  OwnedState dst;
  AddEverything(dst, false);
  dst.AddObject({"rng", {1}, {0}, {}}, "");
  LoadOptions lo;
  lo.root = root;
  auto loaded = LoadCheckpoint(dst.dict(), lo);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->iteration, 7);
  EXPECT_EQ(dst.CountMismatches(), 0);
  ASSERT_EQ(dst.dict().objects()[0].bytes.size(), 12u);
  EXPECT_EQ(std::memcmp(dst.dict().objects()[0].bytes.data(), "opaque\0state", 12), 0);

  auto report = VerifyCheckpoint(DefaultEnv(), root, {});
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_TRUE(report->ok()) << report->issues[0].ToString();
  EXPECT_GT(report->chunks_checked, 20);

  // The same state with XXH3-128 chunk digests, loaded by two workers with
  // read-ahead on (each keeps 64 KiB of its next chunks requested), verified.
  SaveOptions x = Opts(root, 8, GetParam());
  x.write.hash = ChunkHash::kXxh3_128;
  ASSERT_TRUE(SaveCheckpoint(src.dict(), x).ok());
  OwnedState dx;
  AddEverything(dx, false);
  dx.AddObject({"rng", {1}, {0}, {}}, "");
  LoadOptions lx;
  lx.root = root;
  lx.threads = 2;
  lx.prefetch_bytes = 64 << 10;
  auto lxr = LoadCheckpoint(dx.dict(), lx);
  ASSERT_TRUE(lxr.ok()) << lxr.status().ToString();
  EXPECT_EQ(lxr->iteration, 8);
  EXPECT_EQ(dx.CountMismatches(), 0);
  EXPECT_EQ(std::memcmp(dx.dict().objects()[0].bytes.data(), "opaque\0state", 12), 0);
  VerifyOptions vx;
  vx.iteration = 8;
  auto rx = VerifyCheckpoint(DefaultEnv(), root, vx);
  ASSERT_TRUE(rx.ok()) << rx.status().ToString();
  EXPECT_TRUE(rx->ok());
  EXPECT_EQ(rx->chunks_checked, report->chunks_checked);
}

INSTANTIATE_TEST_SUITE_P(Codecs, RoundTrip, ::testing::Values(Compression::kNone, Compression::kZstd));

// Four thread-ranks save a [64, 24] tensor split on axis 0; a 3-rank job
// splitting axis 1 loads it back. Replicated layernorm is written once.
TEST(CheckpointTest, ThreadRanksSaveAndReshardOnLoad) {
  const std::string root = testing::ScratchDir("threads");
  constexpr int kRanks = 4;
  auto comms = MakeThreadComms(kRanks);
  std::vector<Result<SaveStats>> results(kRanks, Status::Internal("not run"));
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      OwnedState s;
      s.Add(Desc("w", DType::kBFloat16, {64, 24}, {16 * r, 0}, {16, 24}, {0, 0, 0}), true);
      s.Add(Desc("ln", DType::kFloat32, {24}, {0}, {24}, {0, r, 0}), true);  // TP-replicated
      SaveOptions o = Opts(root, 3);
      o.comm = comms[r].get();
      results[r] = SaveCheckpoint(s.dict(), o);
    });
  }
  for (auto& t : threads) t.join();
  for (auto& r : results) ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto m = ReadManifest(DefaultEnv(), root, -1);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->shards.size(), 5u);  // 4 w shards + 1 ln
  EXPECT_EQ(m->files.size(), 4u);

  for (int r = 0; r < 3; ++r) {
    OwnedState d;
    d.Add(Desc("w", DType::kBFloat16, {64, 24}, {0, 8 * r}, {64, 8}), false);
    d.Add(Desc("ln", DType::kFloat32, {24}, {0}, {24}), false);
    LoadOptions lo;
    lo.root = root;
    auto st = LoadCheckpoint(d.dict(), lo);
    ASSERT_TRUE(st.ok()) << st.status().ToString();
    EXPECT_EQ(d.CountMismatches(), 0);
  }
}

TEST(CheckpointTest, ReplicasAreBalancedOverHolders) {
  const std::string root = testing::ScratchDir("balance");
  constexpr int kRanks = 4;
  auto comms = MakeThreadComms(kRanks);
  std::vector<int64_t> per_rank;
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      OwnedState s;  // 8 fully replicated tensors (DP replicas): main copy on rank 0 only
      for (int k = 0; k < 8; ++k)
        s.Add(Desc("rep" + std::to_string(k), DType::kFloat32, {256}, {0}, {256}, {0, 0, r}), true);
      SaveOptions o = Opts(root, 1);
      o.comm = comms[r].get();
      auto st = SaveCheckpoint(s.dict(), o);
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      if (r == 0) per_rank = st->bytes_per_rank;
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(per_rank.size(), 4u);
  for (int64_t b : per_rank) EXPECT_EQ(b, 2 * 256 * 4);  // 2 tensors each
}

class BadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::ScratchDir("bad");
    OwnedState s;
    s.Add(Desc("w", DType::kFloat32, {300, 10}, {0, 0}, {300, 10}), true);
    ASSERT_TRUE(SaveCheckpoint(s.dict(), Opts(root_, 5)).ok());
    iter_dir_ = root_ + "/" + IterDirName(5);
    shard_ = iter_dir_ + "/" + ShardFileName(0);
  }
  Status Load() {
    OwnedState d;
    d.Add(Desc("w", DType::kFloat32, {300, 10}, {0, 0}, {300, 10}), false);
    LoadOptions lo;
    lo.root = root_;
    return LoadCheckpoint(d.dict(), lo).status();
  }
  std::string root_, iter_dir_, shard_;
};

TEST_F(BadInput, FlippedByteIsNamedByVerifyAndLoader) {
  auto m = ReadManifest(DefaultEnv(), root_, -1);
  ASSERT_TRUE(m.ok());
  const ChunkRecord& c = m->shards[0].record.chunks[2];
  {
    std::fstream f(shard_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(c.file_offset + 17));
    char b;
    f.read(&b, 1);
    b ^= 0x10;
    f.seekp(std::streamoff(c.file_offset + 17));
    f.write(&b, 1);
  }
  auto report = VerifyCheckpoint(DefaultEnv(), root_, {});
  ASSERT_TRUE(report.ok());
  ASSERT_FALSE(report->ok());
  EXPECT_EQ(report->issues[0].tensor, "w");
  EXPECT_EQ(report->issues[0].chunk, 2);
  EXPECT_NE(report->issues[0].ToString().find("sha256 mismatch"), std::string::npos);
  Status st = Load();
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("chunk 2"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("'w'"), std::string::npos) << st.ToString();
}

TEST_F(BadInput, TruncatedShardFile) {
  fs::resize_file(shard_, fs::file_size(shard_) / 2);
  Status st = Load();
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("rank_00000.h5"), std::string::npos) << st.ToString();
  auto report = VerifyCheckpoint(DefaultEnv(), root_, {});
  ASSERT_TRUE(report.ok());
  EXPECT_FALSE(report->ok());
}

TEST_F(BadInput, MissingShardFile) {
  fs::remove(shard_);
  Status st = Load();
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_NE(st.message().find("rank_00000.h5"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("missing"), std::string::npos) << st.ToString();
}

TEST_F(BadInput, MissingManifest) {
  fs::remove(iter_dir_ + "/manifest.json");
  Status st = Load();
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("no manifest"), std::string::npos) << st.ToString();
}

TEST_F(BadInput, TornManifest) {
  std::string p = iter_dir_ + "/manifest.json";
  fs::resize_file(p, fs::file_size(p) - 10);
  Status st = Load();
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("self-hash mismatch"), std::string::npos) << st.ToString();
}

TEST_F(BadInput, GarbageAndEmptyTracker) {
  std::ofstream(root_ + "/latest_checkpointed_iteration.txt") << "release\n";
  Status st = Load();
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("does not hold an iteration number"), std::string::npos) << st.ToString();
  std::ofstream(root_ + "/latest_checkpointed_iteration.txt", std::ios::trunc).flush();
  st = Load();
  EXPECT_EQ(st.code(), Code::kCorruption);
  EXPECT_NE(st.message().find("is empty"), std::string::npos) << st.ToString();
}

TEST_F(BadInput, WrongLayoutRequestIsNamed) {
  OwnedState d;
  d.Add(Desc("w", DType::kFloat32, {300, 12}, {0, 0}, {300, 12}), false);
  d.Add(Desc("absent", DType::kFloat32, {3}, {0}, {3}), false);
  LoadOptions lo;
  lo.root = root_;
  Status st = LoadCheckpoint(d.dict(), lo).status();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'w'"), std::string::npos) << st.ToString();
}

TEST_F(BadInput, ExistingIterationIsNotReplacedAndStaleTmpIsCleaned) {
  fs::create_directory(root_ + "/.iter_0000009.tmp-dead");
  std::ofstream(root_ + "/.iter_0000009.tmp-dead/rank_00000.h5") << "partial";
  OwnedState s;
  s.Add(Desc("w", DType::kFloat32, {300, 10}, {0, 0}, {300, 10}), true);
  Status st = SaveCheckpoint(s.dict(), Opts(root_, 5)).status();
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("already exists"), std::string::npos) << st.ToString();
  ASSERT_TRUE(SaveCheckpoint(s.dict(), Opts(root_, 6)).ok());
  EXPECT_FALSE(fs::exists(root_ + "/.iter_0000009.tmp-dead"));
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root_), 6);
}

TEST_F(BadInput, FailedRankLeavesPreviousCheckpointLatest) {
  constexpr int kRanks = 3;
  auto comms = MakeThreadComms(kRanks);
  std::vector<Status> st(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      OwnedState s;
      s.Add(Desc("w", DType::kFloat32, {300, 10}, {100 * r, 0}, {100, 10}), true);
      SaveOptions o = Opts(root_, 8);
      o.comm = comms[r].get();
      o.hook = [](std::string_view step, int rank) {
        return step == "shard_fsync" && rank == 2 ? Status::IOError("injected fsync failure") : Status::Ok();
      };
      st[r] = SaveCheckpoint(s.dict(), o).status();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : st) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s.ToString();
  }
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root_), 5);
  EXPECT_FALSE(fs::exists(root_ + "/" + IterDirName(8)));
  for (const auto& e : fs::directory_iterator(root_))  // the aborted save's tmp dir is gone too
    EXPECT_EQ(e.path().filename().string().find(".iter_"), std::string::npos) << e.path();
  for (const auto& s : st) EXPECT_EQ(s.message().find("Aborted: Aborted"), std::string::npos) << s.ToString();
  EXPECT_TRUE(Load().ok());
}

TEST_F(BadInput, NonFiniteStateIsRefused) {
  OwnedState s;
  s.Add(Desc("w", DType::kFloat32, {300, 10}, {0, 0}, {300, 10}), true);
  float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(s.dict().tensors()[0].data.data() + 4 * 123, &nan, 4);
  SaveOptions o = Opts(root_, 9);
  o.nonfinite = NonFinitePolicy::kRefuse;
  Status st = SaveCheckpoint(s.dict(), o).status();
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("NaN at local flat index 123, global index [12, 3]"), std::string::npos)
      << st.ToString();
  EXPECT_EQ(*ReadTracker(DefaultEnv(), root_), 5);
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// Three thread-ranks each hold a box of "w"; the boxes either leave a gap or overlap.
Status SaveBoxes(const std::string& root, const std::vector<std::pair<int64_t, int64_t>>& rows) {
  auto comms = MakeThreadComms(int(rows.size()));
  std::vector<Status> st(rows.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < int(rows.size()); ++r) {
    threads.emplace_back([&, r] {
      OwnedState s;
      s.Add(Desc("decoder.layers.0.mlp.linear_fc2.weight", DType::kFloat32, {30, 4}, {rows[r].first, 0},
                 {rows[r].second, 4}),
            true);
      SaveOptions o = Opts(root, 1);
      o.comm = comms[r].get();
      st[r] = SaveCheckpoint(s.dict(), o).status();
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& s : st)
    if (s.ok()) return s;
  return st[0];
}

TEST(CoverageTest, GapIsRejectedNamingTheTensor) {
  const std::string root = testing::ScratchDir("gap");
  Status st = SaveBoxes(root, {{0, 10}, {10, 10}, {22, 8}});  // rows 20..21 missing
  EXPECT_EQ(st.code(), Code::kAborted) << st.ToString();
  EXPECT_NE(st.message().find("decoder.layers.0.mlp.linear_fc2.weight"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("8 of 120 elements uncovered"), std::string::npos) << st.ToString();
  EXPECT_FALSE(fs::exists(root + "/" + IterDirName(1)));
}

TEST(CoverageTest, OverlapIsRejectedNamingTheTensor) {
  const std::string root = testing::ScratchDir("overlap");
  Status st = SaveBoxes(root, {{0, 10}, {8, 12}, {20, 10}});  // rows 8..9 twice
  EXPECT_EQ(st.code(), Code::kAborted) << st.ToString();
  EXPECT_NE(st.message().find("decoder.layers.0.mlp.linear_fc2.weight"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("overlap"), std::string::npos) << st.ToString();
  EXPECT_FALSE(fs::exists(root + "/" + IterDirName(1)));
}

}  // namespace
}  // namespace ckpt

namespace ckpt {
namespace {

// One rank's file of the newest iteration is damaged: with --fallback every
// rank must move to the same older iteration (they decide each attempt together).
TEST(FallbackTest, RanksAgreeOnTheIterationToFallBackTo) {
  const std::string root = testing::ScratchDir("fallback");
  auto run = [&](int64_t iter, bool load, std::vector<int64_t>* got) {
    auto comms = MakeThreadComms(2);
    std::vector<std::thread> threads;
    std::vector<Status> st(2);
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        OwnedState s;
        s.Add(Desc("w", DType::kFloat32, {200, 8}, {100 * r, 0}, {100, 8}), !load);
        if (!load) {
          SaveOptions o = Opts(root, iter);
          o.comm = comms[r].get();
          st[r] = SaveCheckpoint(s.dict(), o).status();
          return;
        }
        LoadOptions lo;
        lo.root = root;
        lo.comm = comms[r].get();
        lo.fallback = true;
        auto res = LoadCheckpoint(s.dict(), lo);
        st[r] = res.status();
        if (res.ok()) (*got)[r] = res->iteration;
        if (res.ok() && s.CountMismatches() != 0) st[r] = Status::Internal("wrong values");
      });
    }
    for (auto& t : threads) t.join();
    for (auto& s : st) ASSERT_TRUE(s.ok()) << s.ToString();
  };
  run(1, false, nullptr);
  run(2, false, nullptr);
  auto m = ReadManifest(DefaultEnv(), root, 2);
  ASSERT_TRUE(m.ok());
  for (const auto& s : m->shards) {
    if (m->files[s.file].rank != 1) continue;
    std::fstream f(root + "/" + IterDirName(2) + "/" + m->files[s.file].name, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(s.record.chunks[0].file_offset));
    f.put('\x55');
    f.put('\x55');
  }
  std::vector<int64_t> got(2, -1);
  run(0, true, &got);
  EXPECT_EQ(got[0], 1);
  EXPECT_EQ(got[1], 1);
}

}  // namespace
}  // namespace ckpt
