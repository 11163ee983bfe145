// AgreeStatus / AgreeOutcomes (ckpt/base/agree.h), threads as ranks: every
// rank returns the same answer - all OK, or the failure whose origin came
// first (own report before a relay), or a timeout naming the silent rank as
// a typed missing peer - and the loader's agreement built on it.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <thread>

#include "ckpt/base/agree.h"
#include "ckpt/base/status_wire.h"
#include "ckpt/protocol/checkpoint.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

// Runs body(rank, comm) on `n` thread ranks; ranks in `silent` never call.
template <typename T>
std::vector<T> OnRanks(int n, const std::function<T(int, Comm*)>& body, std::vector<int> silent = {}) {
  auto comms = MakeThreadComms(n);
  std::vector<T> out(n, T(Status::Internal("not run")));
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r)
    if (std::find(silent.begin(), silent.end(), r) == silent.end())
      ts.emplace_back([&, r] { out[r] = body(r, comms[r].get()); });
  for (auto& t : ts) t.join();
  return out;
}

TEST(AgreeTest, AllOkGivesEveryPayload) {
  auto got = OnRanks<Result<std::vector<std::string>>>(3, [](int r, Comm* c) {
    return AgreeOutcomes(c, Result<std::string>("p" + std::to_string(r)), Phase::kLoad, Millis(5000));
  });
  for (int r = 0; r < 3; ++r) {
    ASSERT_TRUE(got[r].ok()) << got[r].status().ToString();
    EXPECT_EQ(*got[r], (std::vector<std::string>{"p0", "p1", "p2"}));
  }
  auto st = OnRanks<Status>(3, [](int, Comm* c) { return AgreeStatus(c, Status::Ok(), Phase::kVote, Millis(5000)); });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.ToString();
}

TEST(AgreeTest, OneFailureReachesEveryRankTyped) {
  auto got = OnRanks<Status>(3, [](int r, Comm* c) {
    const Status mine = r == 2 ? Status::Corruption("bad chunk").WithCause(Code::kIOError) : Status::Ok();
    return AgreeStatus(c, mine, Phase::kResumeApply, Millis(5000));
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r].code(), Code::kCorruption) << got[r].ToString();
    EXPECT_EQ(got[r].cause(), Code::kIOError);
    EXPECT_EQ(got[r].message(), "rank 2: bad chunk");
    EXPECT_EQ(got[r].origin_rank(), 2);
    EXPECT_EQ(got[r].phase(), Phase::kResumeApply);
  }
}

// Rank 3 fails on its own; rank 1 relays the failure rank 2 hit first (its
// origin), which rank 2 reports itself too: origin 2 wins, in rank 2's own
// words, on every rank.
TEST(AgreeTest, LowestOriginWinsAndItsOwnReportBeforeARelay) {
  auto got = OnRanks<Status>(4, [](int r, Comm* c) {
    Status mine;
    if (r == 1) mine = Status(Code::kAborted, "relayed", 2, Phase::kLoadShare);
    if (r == 2) mine = Status::IOError("pread failed");
    if (r == 3) mine = Status::NoSpace("disk full");
    return AgreeStatus(c, mine, Phase::kLoad, Millis(5000));
  });
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(got[r].code(), Code::kIOError) << r << ": " << got[r].ToString();
    EXPECT_EQ(got[r].message(), "rank 2: pread failed");
    EXPECT_EQ(got[r].origin_rank(), 2);
    EXPECT_EQ(got[r].phase(), Phase::kLoad);
  }
  EXPECT_EQ(FirstOrigin({Status::Ok(), Status(Code::kAborted, "r", 0, Phase::kVote),
                         Status(Code::kIOError, "x", 2, Phase::kWrite)}),
            1);
  EXPECT_EQ(FirstOrigin({Status::Ok(), Status::Ok()}), -1);
}

// Rank 2 never arrives: every rank that did fails with kTimeout naming it as
// a typed missing peer in the agreement's phase - except a rank with a
// failure of its own, which began first and is kept.
TEST(AgreeTest, ASilentRankIsATypedMissingPeer) {
  auto got = OnRanks<Status>(3,
                             [](int r, Comm* c) {
                               const Status mine = r == 1 ? Status::IOError("own") : Status::Ok();
                               return AgreeStatus(c, mine, Phase::kBucketLayout, Millis(200));
                             },
                             {2});
  EXPECT_EQ(got[0].code(), Code::kTimeout) << got[0].ToString();
  EXPECT_EQ(got[0].missing().ranks, std::vector<int>{2});
  EXPECT_EQ(got[0].missing().phase, Phase::kBucketLayout);
  EXPECT_EQ(got[1].code(), Code::kIOError) << got[1].ToString();
  EXPECT_EQ(got[1].origin_rank(), 1);
  EXPECT_EQ(got[1].phase(), Phase::kBucketLayout);
}

TEST(AgreeTest, AGarbledPeerIsItsFailureNeverOk) {
  auto got = OnRanks<Status>(2, [](int r, Comm* c) {
    if (r == 1) return c->AllGather("x:garbled", Millis(5000), Phase::kLoad).status();
    return AgreeStatus(c, Status::Ok(), Phase::kLoad, Millis(5000));
  });
  EXPECT_EQ(got[0].code(), Code::kInternal) << got[0].ToString();
  EXPECT_EQ(got[0].message().rfind("rank 1: malformed outcome", 0), 0u) << got[0].ToString();
  EXPECT_EQ(got[0].origin_rank(), 1);
}

TEST(AgreeTest, OneRankKeepsItsOwnWithItsOrigin) {
  const Status st = AgreeStatus(nullptr, Status::NotFound("gone"), Phase::kResumeManifest, Millis(10));
  EXPECT_EQ(st.code(), Code::kNotFound);
  EXPECT_EQ(st.message(), "gone");
  EXPECT_EQ(st.origin_rank(), 0);
  EXPECT_EQ(st.phase(), Phase::kResumeManifest);
  LocalComm local;
  auto one = AgreeOutcomes(&local, Result<std::string>("x"), Phase::kLoad, Millis(10));
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(*one, std::vector<std::string>{"x"});
}

TEST(PhaseTest, EveryPhaseHasOneNameThatParsesBack) {
  for (int p = 0; p <= int(kLastPhase); ++p) {
    const std::string_view name = PhaseName(Phase(p));
    EXPECT_EQ(ParsePhase(name), Phase(p)) << name;
    EXPECT_EQ(name.find_first_of(" -"), std::string_view::npos) << name;  // one spelling: snake_case
  }
  EXPECT_EQ(ParsePhase("nonfinite guard"), std::nullopt);
  // On the wire a phase travels by name; a name no phase has is malformed.
  std::string wire = EncodeStatus(Status(Code::kIOError, "m", 1, Phase::kVote));
  EXPECT_EQ(DecodeStatus(wire).phase(), Phase::kVote);
  wire.replace(wire.find("vote"), 4, "voto");
  EXPECT_EQ(DecodeStatus(wire).code(), Code::kInternal);
}

// Regression: the loader's ranks agree on one failure. Rank 1 misses a key
// (strict) and rank 2 asks for a wrong shape; before, each failing rank
// returned its own failure (the CLI needed a second round, skipped after a
// timeout, so ranks could exit with different codes); now every rank returns
// rank 1's, typed.
TEST(AgreeTest, LoadRanksReturnOneAgreedFailure) {
  const std::string root = testing::ScratchDir("agree_load");
  {
    testing::OwnedState s;
    s.Add(testing::Desc("w", DType::kFloat32, {8, 4}, {0, 0}, {8, 4}), true);
    SaveOptions o;
    o.root = root;
    o.iteration = 3;
    ASSERT_TRUE(SaveCheckpoint(s.dict(), o).ok());
  }
  auto got = OnRanks<Status>(3, [&](int r, Comm* c) {
    testing::OwnedState d;
    const int64_t cols = r == 2 ? 5 : 4;
    d.Add(testing::Desc(r == 1 ? "missing" : "w", DType::kFloat32, {8, cols}, {0, 0}, {8, cols}), false);
    LoadOptions lo;
    lo.root = root;
    lo.comm = c;
    lo.strict = StrictMode::kMissing;
    lo.timeout = Millis(5000);
    return LoadCheckpoint(d.dict(), lo).status();
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_FALSE(got[r].ok()) << r;
    EXPECT_EQ(got[r].origin_rank(), 1) << r << ": " << got[r].ToString();
    EXPECT_EQ(got[r].code(), got[1].code()) << r << ": " << got[r].ToString();
    EXPECT_EQ(got[r].message(), got[1].message()) << r;
  }
}

}  // namespace
}  // namespace ckpt
