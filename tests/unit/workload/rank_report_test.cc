// ReduceLoadReports: sums, maxima and the per-rank figures of a load job
// (bytes read from disk and received per rank: the read-sharing balance).
#include <gtest/gtest.h>

#include "ckpt/workload/rank_report.h"

namespace ckpt::workload {
namespace {

nlohmann::json Report(int64_t bytes, int64_t received) {
  return {{"bytes_read", bytes}, {"bytes_received", received}, {"share_rounds", 1}, {"elements", 10},
          {"zero_filled", 0}, {"bad", 0}, {"opt_bad", 0}, {"opt_elements", 0}, {"first_bad", ""}, {"rss_before", 100},
          {"peak", 200},    {"extra", 100},         {"state", 50},   {"largest_shard", 25}, {"peak_reset", true}};
}

TEST(RankReport, LoadReportsKeepEachRanksReadAndReceivedBytes) {
  auto r = ReduceLoadReports({Report(300, 100), Report(100, 300)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ((*r)["bytes"], 400);
  EXPECT_EQ((*r)["received"], 400);
  EXPECT_EQ((*r)["max_rank_bytes"], 300);
  ASSERT_EQ((*r)["per_rank"].size(), 2u);
  EXPECT_EQ((*r)["per_rank"][0]["bytes"], 300);
  EXPECT_EQ((*r)["per_rank"][1]["bytes"], 100);
  EXPECT_EQ((*r)["per_rank"][1]["received"], 300);
}

TEST(RankReport, AReportWithoutReadBytesNamesTheRank) {
  auto bad = Report(1, 1);
  bad.erase("bytes_received");
  auto r = ReduceLoadReports({Report(1, 1), bad});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("rank 1"), std::string::npos) << r.status().ToString();
}

nlohmann::json SaveReport(double write, double vote, double commit) {
  return {{"bytes_written", 1000},
          {"phase_seconds", {{"plan", 0.01}, {"write", write}, {"vote", vote}, {"commit", commit}}}};
}

// Rank 2 writes slowly: rank 0 waits for its vote, ranks 1 and 3 for the
// outcome. The reduction names rank 2 from its write phase; rank 0's own
// timings (write small, vote big) would blame the vote.
TEST(RankReport, SaveReportsNameTheSlowWriterNotTheRankThatWaited) {
  auto r = ReduceSaveReports({SaveReport(0.1, 2.0, 0.01), SaveReport(0.1, 0, 2.0), SaveReport(2.1, 0, 0.01),
                              SaveReport(0.12, 0, 2.0)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const auto& s = (*r)["straggler"];
  EXPECT_EQ(s["rank"], 2);
  EXPECT_EQ(s["phase"], "write");
  EXPECT_DOUBLE_EQ(s["seconds"].get<double>(), 2.1);
  EXPECT_DOUBLE_EQ(s["median_seconds"].get<double>(), 0.11);
  EXPECT_GT(s["ratio"].get<double>(), 19.0);
  EXPECT_NE(s["longest_wait_rank"], 2);
  ASSERT_EQ((*r)["per_rank"].size(), 4u);
  EXPECT_DOUBLE_EQ((*r)["per_rank"][0]["wait_s"].get<double>(), 2.01);
  EXPECT_FALSE(ReduceSaveReports({SaveReport(1, 0, 0), {{"bytes_written", 1}}}).ok());
}

TEST(RankReport, RestoreReportsTakeTheSlowestRankAndCountThePeerFetches) {
  auto rep = [](double s, int64_t fetched) {
    return nlohmann::json{{"seconds", s}, {"fetched_bytes", fetched}, {"phases", {{"load", s / 2}}}};
  };
  auto r = ReduceRestoreReports({rep(0.5, 0), rep(1.5, 100), rep(0.7, 50), rep(0.2, 0)});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_DOUBLE_EQ((*r)["seconds"].get<double>(), 1.5);
  EXPECT_EQ((*r)["slowest_rank"]["rank"], 1);
  EXPECT_DOUBLE_EQ((*r)["slowest_rank"]["phases_seconds"]["load"].get<double>(), 0.75);
  EXPECT_EQ((*r)["fetched_bytes_all_ranks"], 150);
  EXPECT_EQ((*r)["ranks_fetched_from_peers"], 2);
  auto bad = ReduceRestoreReports({rep(0.5, 0), {{"seconds", 1.0}}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().ToString().find("rank 1"), std::string::npos) << bad.status().ToString();
}

// Issue 33 restart profile: every rank's restore (wall and CPU seconds and
// phases) comes back, not only the slowest one's; a load's split and worker
// count go into the phases; the timer says how long the process ran first.
TEST(RankReport, RestoreReportsKeepEveryRanksPhasesAndCpu) {
  LoadStats ls;
  ls.read_seconds = 0.25, ls.hash_seconds = 0.5, ls.decode_seconds = 0.125, ls.copy_seconds = 0.0625, ls.threads = 3;
  const nlohmann::json phases = WithLoadPhases({{"fetch", 1.0}}, ls);
  EXPECT_DOUBLE_EQ(phases["fetch"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(phases["load_read"].get<double>(), 0.25);
  EXPECT_DOUBLE_EQ(phases["load_hash"].get<double>(), 0.5);
  EXPECT_DOUBLE_EQ(phases["load_decode"].get<double>(), 0.125);
  EXPECT_DOUBLE_EQ(phases["load_copy"].get<double>(), 0.0625);
  EXPECT_EQ(phases["load_threads"], 3);

  const RestoreTimer timer;
  volatile double spin = 0;
  for (int i = 0; i < 2000000; ++i) spin = spin + 1.0;  // some CPU time for the timer to see
  const nlohmann::json mine = timer.Report(phases, 7);
  EXPECT_GT(mine["seconds"].get<double>(), 0);
  EXPECT_GT(mine["cpu_seconds"].get<double>(), 0);
  EXPECT_EQ(mine["fetched_bytes"], 7);
  EXPECT_GT(mine["phases"]["before_restore"].get<double>(), 0);  // this test process ran before the timer
  EXPECT_LT(mine["phases"]["before_restore"].get<double>(), 24 * 3600.0);

  nlohmann::json other = mine;
  other["seconds"] = mine["seconds"].get<double>() + 1;
  other.erase("cpu_seconds");  // an older rank's report
  auto r = ReduceRestoreReports({mine, other});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ((*r)["per_rank"].size(), 2u);
  EXPECT_EQ((*r)["per_rank"][0]["rank"], 0);
  EXPECT_DOUBLE_EQ((*r)["per_rank"][0]["cpu_seconds"].get<double>(), mine["cpu_seconds"].get<double>());
  EXPECT_DOUBLE_EQ((*r)["per_rank"][1]["cpu_seconds"].get<double>(), -1);
  EXPECT_DOUBLE_EQ((*r)["per_rank"][0]["phases_seconds"]["load_hash"].get<double>(), 0.5);
  EXPECT_EQ((*r)["slowest_rank"]["rank"], 1);
}

}  // namespace
}  // namespace ckpt::workload
