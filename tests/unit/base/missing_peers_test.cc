// A deadline failure names its lost peers as typed fields (Status::missing():
// ranks, hosts, phase), on the wire and through the relay of GatherDecide, so
// survivors and reports judge who was lost without reading message text.
#include <gtest/gtest.h>

#include <thread>

#include "ckpt/base/comm.h"
#include "ckpt/base/status.h"
#include "ckpt/base/status_wire.h"
#include "ckpt/protocol/save_progress.h"

namespace ckpt {
namespace {

MissingPeers Peers() { return {{2, 5}, {"node-b", ""}, Phase::kVote}; }

void ExpectPeers(const Status& s, const MissingPeers& want) {
  EXPECT_EQ(s.missing().ranks, want.ranks) << s.ToString();
  EXPECT_EQ(s.missing().hosts, want.hosts) << s.ToString();
  EXPECT_EQ(s.missing().phase, want.phase) << s.ToString();
}

TEST(MissingPeersTest, KeptByContextOriginAndWire) {
  const Status s = Status::Timeout("no answer").WithMissing(Peers()).At(0, Phase::kVote).WithContext("save");
  ExpectPeers(s, Peers());
  EXPECT_EQ(s.origin_rank(), 0);
  const Status back = DecodeStatus(EncodeStatus(s));
  EXPECT_EQ(back.code(), Code::kTimeout);
  EXPECT_EQ(back.message(), s.message());
  EXPECT_EQ(back.origin_rank(), 0);
  EXPECT_EQ(back.phase(), Phase::kVote);
  ExpectPeers(back, Peers());
  EXPECT_EQ(Peers().Describe(), "rank 2 on host 'node-b', rank 5 on host '?'");
  // A status without missing peers keeps the plain wire form and decodes to none.
  EXPECT_EQ(EncodeStatus(Status::IOError("x")).front(), 'S');
  EXPECT_TRUE(DecodeStatus(EncodeStatus(Status::IOError("x"))).missing().empty());
  EXPECT_TRUE(Status::Ok().WithMissing(Peers()).missing().empty());
}

TEST(MissingPeersTest, TruncatedPrefixIsMalformed) {
  const std::string wire = EncodeStatus(Status::Timeout("t").WithMissing(Peers()));
  for (size_t n : {size_t(1), size_t(5), size_t(12), wire.find('S', 1)}) {
    const Status st = DecodeStatus(std::string_view(wire).substr(0, n));
    EXPECT_EQ(st.code(), Code::kInternal) << n;
    EXPECT_TRUE(st.missing().empty());
  }
}

TEST(MissingPeersTest, OutcomesKeepThem) {
  const Status lost = Status::Timeout("t").WithMissing(Peers());
  auto got = DecodeOutcome(EncodeFailure(lost));
  ASSERT_FALSE(got.ok());
  ExpectPeers(got.status(), Peers());
}

// Rank 2 never arrives: root's timeout names it typed, with this host (the
// thread ranks share it), and every other survivor gets the same fields
// through root's relayed failure.
TEST(MissingPeersTest, GatherDecideRelaysThemToEverySurvivor) {
  auto comms = MakeThreadComms(3);
  std::vector<Status> st(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      st[r] = comms[r]->GatherDecide("x", 0, Millis(200), Phase::kVote, Phase::kCommit, [](auto) { return "d"; }).status();
    });
  for (auto& t : ranks) t.join();
  const MissingPeers want{{2}, {ThisHostName()}, Phase::kVote};
  ASSERT_FALSE(ThisHostName().empty());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(st[r].code(), Code::kTimeout) << r << ": " << st[r].ToString();
    ExpectPeers(st[r], want);
  }
}

// Root's stall detector (no write progress for a deadline) names the stalled
// writers typed too, with their hosts: the faults runner judges by that.
TEST(MissingPeersTest, StalledWritersAreRecorded) {
  auto comms = MakeThreadComms(2);
  const auto t0 = std::chrono::steady_clock::now();
  VoteTally tally(2, Millis(100), t0);
  const Status st = tally.Stalled(t0 + Millis(200), 0, comms[0].get());
  EXPECT_EQ(st.code(), Code::kTimeout) << st.ToString();
  ExpectPeers(st, {{0, 1}, {ThisHostName(), ThisHostName()}, Phase::kVote});
}

}  // namespace
}  // namespace ckpt
