// Progress counters, ETA, throttling, the reporter thread and MeterEnv
// (ckpt/base/progress.h).
#include "ckpt/base/progress.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>
#include <vector>

#include "harness/test_util.h"

namespace ckpt {
namespace {

using std::chrono::milliseconds;
using Clock = Progress::Clock;

TEST(ProgressTest, RateAndEta) {
  EXPECT_DOUBLE_EQ(ProgressRate(100, 2.0), 50.0);
  EXPECT_DOUBLE_EQ(ProgressRate(100, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(ProgressEta(100, 300, 2.0), 4.0);  // 200 bytes left at 50 B/s
  EXPECT_DOUBLE_EQ(ProgressEta(0, 300, 2.0), -1);     // no rate yet
  EXPECT_DOUBLE_EQ(ProgressEta(100, 0, 2.0), -1);     // no total
  EXPECT_DOUBLE_EQ(ProgressEta(400, 300, 2.0), 0.0);  // past the estimate
}

TEST(ProgressTest, SnapshotRaisesTotalsAndFinalEndsAtDone) {
  const auto t0 = Clock::now();
  Progress p("verify", t0);
  p.SetTotals(1000, 4);
  p.SetPhase("read");
  p.AddBytes(250);
  p.AddFile();
  ProgressSnapshot s = p.Snapshot(t0 + milliseconds(500));
  EXPECT_EQ(s.op, "verify");
  EXPECT_EQ(s.phase, "read");
  EXPECT_EQ(s.bytes_done, 250);
  EXPECT_EQ(s.bytes_total, 1000);
  EXPECT_EQ(s.files_done, 1);
  EXPECT_EQ(s.files_total, 4);
  EXPECT_DOUBLE_EQ(s.rate, 500.0);
  EXPECT_DOUBLE_EQ(s.eta_s, 1.5);
  EXPECT_FALSE(s.final);
  p.AddBytes(1000);  // more than the estimate: the total follows, never "125 %"
  s = p.Snapshot(t0 + milliseconds(1000));
  EXPECT_EQ(s.bytes_total, 1250);
  s = p.Snapshot(t0 + milliseconds(1000), /*final=*/true);
  EXPECT_TRUE(s.final);
  EXPECT_EQ(s.bytes_total, s.bytes_done);
  EXPECT_EQ(s.files_total, 1);
  EXPECT_EQ(s.eta_s, 0.0);
}

TEST(ProgressTest, ThrottleAtMostOncePerIntervalAndOnlyWhenMoved) {
  ProgressThrottle th(milliseconds(500));
  const auto t0 = Clock::now();
  ProgressSnapshot s;
  s.bytes_done = 10;
  EXPECT_TRUE(th.Due(s, t0));                       // the first
  s.bytes_done = 20;
  EXPECT_FALSE(th.Due(s, t0 + milliseconds(100)));  // too soon
  EXPECT_TRUE(th.Due(s, t0 + milliseconds(600)));
  EXPECT_FALSE(th.Due(s, t0 + milliseconds(2000)));  // nothing moved
  s.phase = "write";
  EXPECT_TRUE(th.Due(s, t0 + milliseconds(2100)));   // the phase moved
  s.final = true;
  EXPECT_TRUE(th.Due(s, t0 + milliseconds(2101)));   // the final one always
}

class Recorder final : public ProgressSink {
 public:
  void OnProgress(const ProgressSnapshot& s) override {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(s);
  }
  std::mutex mu;
  std::vector<ProgressSnapshot> seen;
};

TEST(ProgressTest, ReporterThrottlesAndEndsWithOneFinal) {
  Progress p("save");
  p.SetTotals(100 * 1000, 1);
  Recorder rec;
  {
    ProgressReporter rep(&p, &rec, milliseconds(20));
    for (int i = 0; i < 100; ++i) {
      p.AddBytes(1000);
      std::this_thread::sleep_for(milliseconds(2));
    }
    rep.Finish();
    rep.Finish();  // idempotent; the destructor adds nothing either
  }
  ASSERT_GE(rec.seen.size(), 2u);
  // ~200+ ms of work at one report per 20 ms: far fewer reports than the 100 adds.
  EXPECT_LE(rec.seen.size(), 30u);
  for (size_t i = 1; i < rec.seen.size(); ++i) EXPECT_GE(rec.seen[i].bytes_done, rec.seen[i - 1].bytes_done);
  for (size_t i = 0; i + 1 < rec.seen.size(); ++i) EXPECT_FALSE(rec.seen[i].final);
  EXPECT_TRUE(rec.seen.back().final);
  EXPECT_EQ(rec.seen.back().bytes_done, 100 * 1000);
  EXPECT_EQ(rec.seen.back().bytes_total, 100 * 1000);
}

TEST(ProgressTest, MeterEnvCountsBytesAndEachDataFileOnce) {
  const std::string dir = testing::ScratchDir("progress_meter");
  Progress writes("save"), reads("load");
  MeterEnv wenv(DefaultEnv(), &writes, /*count_reads=*/false, /*count_writes=*/true, ".h5");
  MeterEnv renv(DefaultEnv(), &reads, /*count_reads=*/true, /*count_writes=*/false, ".h5");
  std::vector<std::byte> data(4096, std::byte{7});
  for (const char* name : {"a.h5", "b.h5", "manifest.json"}) {
    auto f = wenv.OpenFile(JoinPath(dir, name), OpenMode::kCreate);
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE((*f)->PWrite(0, data).ok());
    ASSERT_TRUE((*f)->PWrite(4096, std::span<const std::byte>(data).first(100)).ok());
    ASSERT_TRUE((*f)->Close().ok());
  }
  EXPECT_EQ(writes.bytes_done(), 3 * 4196);
  EXPECT_EQ(writes.files_done(), 2);  // the .h5 files only
  for (int pass = 0; pass < 2; ++pass) {  // a file read twice counts once
    auto f = renv.OpenFile(JoinPath(dir, "a.h5"), OpenMode::kRead);
    ASSERT_TRUE(f.ok());
    std::vector<std::byte> buf(8192);
    auto n = (*f)->PRead(0, buf);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, 4196u);
  }  // closed by its destructor
  EXPECT_EQ(reads.bytes_done(), 2 * 4196);
  EXPECT_EQ(reads.files_done(), 1);
}

// reshard's meter: only the source's data files count (not the destination it
// reads back, nor manifests), so its bytes are reported once.
TEST(ProgressTest, MeterEnvCountsOnlyUnderADirectory) {
  const std::string dir = testing::ScratchDir("progress_meter_under");
  Progress reads("reshard");
  MeterEnv env(DefaultEnv(), &reads, /*count_reads=*/true, /*count_writes=*/false, ".h5");
  env.CountOnlyUnder(JoinPath(dir, "src") + "/");
  std::vector<std::byte> data(1000, std::byte{1});
  for (const char* name : {"src/x.h5", "src/manifest.json", "src2/y.h5", "dst/x.h5"}) {
    const std::string path = JoinPath(dir, name);
    DefaultEnv()->CreateDir(path.substr(0, path.rfind('/'))).IgnoreError();  // present after the first
    auto w = DefaultEnv()->OpenFile(path, OpenMode::kCreate);
    ASSERT_TRUE(w.ok() && (*w)->PWrite(0, data).ok() && (*w)->Close().ok());
    auto f = env.OpenFile(path, OpenMode::kRead);
    ASSERT_TRUE(f.ok());
    std::vector<std::byte> buf(1000);
    ASSERT_TRUE((*f)->PRead(0, buf).ok());
  }
  EXPECT_EQ(reads.bytes_done(), 1000);  // src/x.h5 only ("src2" is not under "src")
  EXPECT_EQ(reads.files_done(), 1);
}

}  // namespace
}  // namespace ckpt
