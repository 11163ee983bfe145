// AsyncLocalSaver (ckpt/protocol/local_async.h), threads as ranks: 2 nodes x
// 1 rank, 1 replica. The state changed right after Start reaches neither the
// local nor the drained global iteration; a failure in the background comes
// back typed (origin rank, phase) from the next Start, which then starts
// nothing, and leaves the previous local iteration the one to resume; the
// snapshot memory is one arena, reused.
#include <gtest/gtest.h>

#include <functional>
#include <thread>

#include "ckpt/protocol/local_async.h"
#include "harness/state_util.h"
#include "harness/test_util.h"

namespace ckpt {
namespace {

constexpr int kWorld = 2;

// One rank's state: its row of "w" (fp32) and "step" (int64), an object.
struct RankState {
  std::vector<float> w = std::vector<float>(64 << 10);
  std::vector<int64_t> step = std::vector<int64_t>(8);
  ShardedStateDict sd;
  explicit RankState(int r) {
    sd.AddTensor(testing::Desc("w", DType::kFloat32, {kWorld, 64 << 10}, {r, 0}, {1, 64 << 10}),
                 std::as_writable_bytes(std::span<float>(w)));
    sd.AddTensor(testing::Desc("step", DType::kInt64, {kWorld, 8}, {r, 0}, {1, 8}),
                 std::as_writable_bytes(std::span<int64_t>(step)));
    sd.AddObject({"args", {kWorld}, {r}, {}});
  }
  void Fill(int r, int64_t it) {
    for (size_t i = 0; i < w.size(); ++i) w[i] = float(r * 1000000 + it * 1000 + int64_t(i % 997));
    for (size_t i = 0; i < step.size(); ++i) step[i] = it * 100 + r * 10 + int64_t(i);
    const std::string s = "r" + std::to_string(r) + " it" + std::to_string(it);
    sd.objects()[0].bytes.assign(reinterpret_cast<const std::byte*>(s.data()),
                                 reinterpret_cast<const std::byte*>(s.data()) + s.size());
  }
  bool Holds(int r, int64_t it) {
    RankState want(r);
    want.Fill(r, it);
    return w == want.w && step == want.step && sd.objects()[0].bytes == want.sd.objects()[0].bytes;
  }
};

LocalTierOptions Tier(const std::string& dir, Comm* comm, StepHook hook = nullptr) {
  LocalTierOptions o;
  o.dir = dir + "/node{node}";
  o.comm = comm;
  o.timeout = Millis(10000);
  o.hook = std::move(hook);
  return o;
}

SaveOptions Global(const std::string& dir, Comm* comm) {
  SaveOptions so;
  so.root = dir + "/global";
  so.comm = comm;
  so.timeout = Millis(10000);
  so.allow_older = true;
  return so;
}

void OnRanks(const std::function<void(int, Comm&)>& fn) {
  auto comms = MakeThreadComms(kWorld);
  std::vector<std::thread> ts;
  for (int r = 0; r < kWorld; ++r) ts.emplace_back([&, r] { fn(r, *comms[r]); });
  for (auto& t : ts) t.join();
}

TEST(AsyncLocalSaver, StateChangedAfterStartReachesNeitherTier) {
  const std::string dir = testing::ScratchDir("local_async_isolation");
  OnRanks([&](int r, Comm& c) {
    AsyncLocalSaver saver;
    RankState s(r);
    s.Fill(r, 2);
    auto started = saver.Start(s.sd, 2, Tier(dir, &c), Global(dir, &c));
    ASSERT_TRUE(started.ok()) << started.status().ToString();
    EXPECT_EQ(started->snapshot_bytes, s.sd.TotalBytes());
    s.Fill(r, 99);  // training goes on at once
    auto job = saver.Wait();
    ASSERT_TRUE(job.ok()) << job.status().ToString();
    EXPECT_TRUE(job->drained);
    EXPECT_EQ(job->local.iteration, 2);
    EXPECT_GT(job->local.sent_bytes, 0);                                 // replicated to the other node
    EXPECT_EQ(saver.Wait().status().code(), Code::kFailedPrecondition);  // nothing in flight

    RankState global(r);
    LoadOptions lo;
    lo.root = dir + "/global";
    lo.iteration = 2;
    lo.comm = &c;
    lo.timeout = Millis(10000);
    ASSERT_TRUE(LoadCheckpoint(global.sd, lo).ok());
    EXPECT_TRUE(global.Holds(r, 2)) << "rank " << r << ": the drained global iteration saw the later state";
    RankState local(r);
    ASSERT_TRUE(LocalRestore(local.sd, 2, Tier(dir, &c)).ok());
    EXPECT_TRUE(local.Holds(r, 2)) << "rank " << r << ": the local iteration saw the later state";
  });
}

TEST(AsyncLocalSaver, BackgroundFailureComesBackTypedFromTheNextStart) {
  const std::string dir = testing::ScratchDir("local_async_failure");
  const StepHook fail_vote = [](std::string_view step, int rank) {
    return step == "local_vote" && rank == 1 ? Status::IOError("injected at the vote") : Status::Ok();
  };
  OnRanks([&](int r, Comm& c) {
    AsyncLocalSaver saver;
    RankState s(r);
    s.Fill(r, 1);
    ASSERT_TRUE(saver.Start(s.sd, 1, Tier(dir, &c), std::nullopt).ok());
    s.Fill(r, 2);
    auto second = saver.Start(s.sd, 2, Tier(dir, &c, fail_vote), std::nullopt);
    ASSERT_TRUE(second.ok()) << "the failure is in the background: " << second.status().ToString();
    ASSERT_TRUE(second->previous.has_value());
    EXPECT_EQ(second->previous->iteration, 1);
    s.Fill(r, 3);
    auto third = saver.Start(s.sd, 3, Tier(dir, &c), std::nullopt);
    ASSERT_FALSE(third.ok());
    EXPECT_EQ(third.status().origin_rank(), 1) << third.status().ToString();
    EXPECT_NE(third.status().phase(), Phase::kNone) << third.status().ToString();
    EXPECT_NE(third.status().ToString().find("background local save of iteration 2"), std::string::npos)
        << third.status().ToString();
    EXPECT_FALSE(saver.in_flight());  // 3 was not started
    auto choice = ChooseResumeTier(Tier(dir, &c), dir + "/global");
    ASSERT_TRUE(choice.ok());
    EXPECT_EQ(choice->tier, "local");
    EXPECT_EQ(choice->iteration, 1);  // 2 was never marked complete
  });
}

TEST(AsyncLocalSaver, OneArenaReusedAcrossSaves) {
  const std::string dir = testing::ScratchDir("local_async_arena");
  OnRanks([&](int r, Comm& c) {
    AsyncLocalSaver saver;
    RankState s(r);
    ASSERT_TRUE(saver.Reserve(AsyncLocalSaver::ArenaBytes(s.sd)).ok());
    const int64_t capacity = saver.arena_capacity();
    EXPECT_GE(capacity, s.sd.TotalBytes() - int64_t(s.sd.objects()[0].bytes.size()));
    for (int64_t it = 1; it <= 3; ++it) {
      s.Fill(r, it);
      auto st = saver.Start(s.sd, it, Tier(dir, &c), it == 3 ? std::optional(Global(dir, &c)) : std::nullopt);
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      EXPECT_EQ(st->allocate_seconds, 0.0);  // reserved: the copy only
    }
    ASSERT_TRUE(saver.Wait().ok());
    EXPECT_EQ(saver.arena_capacity(), capacity);  // the drain read back into the same arena
  });
}

}  // namespace
}  // namespace ckpt
