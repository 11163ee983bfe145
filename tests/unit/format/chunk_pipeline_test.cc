// ChunkPipeline: in-order consumption, the in-flight bound with slow
// consumers and slow preparers, errors (and exceptions) from either side stop
// the run without deadlock, and the serial modes. Every Run goes through
// RunBounded, which fails the test instead of hanging if a Run does not end.
#include "ckpt/format/chunk_pipeline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <random>
#include <stdexcept>
#include <thread>

namespace ckpt {
namespace {

using namespace std::chrono_literals;

// Runs pipe.Run on another thread; a Run that takes over 60 s is a deadlock.
Status RunBounded(ChunkPipeline& pipe, int64_t n, const ChunkPipeline::Step& prepare,
                  const ChunkPipeline::Step& consume) {
  auto f = std::async(std::launch::async, [&] { return pipe.Run(n, prepare, consume); });
  if (f.wait_for(60s) != std::future_status::ready) {
    ADD_FAILURE() << "ChunkPipeline::Run did not return within 60 s (deadlock)";
    std::abort();  // cannot unwind with the run still using this frame
  }
  return f.get();
}

// Tracks prepared-but-unconsumed indices; records the maximum.
struct InFlight {
  std::atomic<int64_t> now{0}, peak{0};
  void Add() {
    int64_t v = ++now, p = peak.load();
    while (v > p && !peak.compare_exchange_weak(p, v)) {
    }
  }
  void Remove() { --now; }
};

TEST(ChunkPipelineTest, ConsumesEveryIndexInOrderWithinTheWindow) {
  for (int threads : {0, 1, 2, 3, 8}) {
    ChunkPipeline pipe(threads);
    EXPECT_EQ(pipe.threads(), threads);
    EXPECT_EQ(pipe.window(), std::max(1, 2 * threads));
    const int64_t n = 200;
    std::vector<int64_t> slots(size_t(pipe.window()), -1);
    std::vector<int64_t> order;
    InFlight inflight;
    auto prepare = [&](int64_t i) {
      inflight.Add();
      std::this_thread::sleep_for(std::chrono::microseconds((i * 37) % 200));
      slots[size_t(i % pipe.window())] = i * i;  // the slot must still be free
      return Status::Ok();
    };
    auto consume = [&](int64_t i) {
      EXPECT_EQ(slots[size_t(i % pipe.window())], i * i) << "slot of " << i << " overwritten or unready";
      order.push_back(i);
      if (i % 7 == 0) std::this_thread::sleep_for(300us);  // a slow store lets the workers run ahead
      inflight.Remove();
      return Status::Ok();
    };
    ASSERT_TRUE(RunBounded(pipe, n, prepare, consume).ok());
    ASSERT_EQ(order.size(), size_t(n));
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(order[size_t(i)], i);
    EXPECT_LE(inflight.peak.load(), pipe.window()) << threads << " threads";
    EXPECT_LE(pipe.peak_in_flight(), pipe.window());
    if (threads > 0) {
      EXPECT_GE(pipe.peak_in_flight(), 2) << "no overlap with " << threads << " threads";
    }
  }
}

TEST(ChunkPipelineTest, SlowConsumerFillsTheWindowAndNoMore) {
  ChunkPipeline pipe(3);
  InFlight inflight;
  auto prepare = [&](int64_t) {
    inflight.Add();
    return Status::Ok();
  };
  auto consume = [&](int64_t) {
    std::this_thread::sleep_for(2ms);
    inflight.Remove();
    return Status::Ok();
  };
  ASSERT_TRUE(RunBounded(pipe, 40, prepare, consume).ok());
  EXPECT_EQ(inflight.peak.load(), pipe.window());
  EXPECT_EQ(pipe.peak_in_flight(), pipe.window());
}

TEST(ChunkPipelineTest, PrepareErrorStopsTheRunAndWaitsForRunningPrepares) {
  for (int threads : {0, 1, 4}) {
    for (int64_t bad : {0, 1, 5, 63}) {
      ChunkPipeline pipe(threads);
      std::atomic<int> running{0}, after_stop{0};
      std::atomic<bool> returned{false};
      std::vector<int64_t> consumed;
      auto prepare = [&](int64_t i) {
        ++running;
        if (returned) ++after_stop;
        std::this_thread::sleep_for(std::chrono::microseconds(50 * (i % 3)));
        --running;
        if (i == bad) return Status::IOError("prepare " + std::to_string(i) + " failed");
        return Status::Ok();
      };
      auto consume = [&](int64_t i) {
        consumed.push_back(i);
        return Status::Ok();
      };
      Status s = RunBounded(pipe, 64, prepare, consume);
      returned = true;
      EXPECT_EQ(s.code(), Code::kIOError) << s.ToString();
      EXPECT_EQ(s.message(), "prepare " + std::to_string(bad) + " failed");
      EXPECT_EQ(running.load(), 0) << "Run returned while a prepare was running";
      for (size_t k = 0; k < consumed.size(); ++k) EXPECT_EQ(consumed[k], int64_t(k));
      EXPECT_LE(int64_t(consumed.size()), bad) << "index " << bad << " consumed although it failed";
      // The pool is reusable after a failed run.
      std::this_thread::sleep_for(1ms);
      EXPECT_EQ(after_stop.load(), 0);
      EXPECT_TRUE(RunBounded(pipe, 10, [](int64_t) { return Status::Ok(); },
                             [](int64_t) { return Status::Ok(); })
                      .ok());
    }
  }
}

TEST(ChunkPipelineTest, ConsumeErrorStopsTheRun) {
  for (int threads : {0, 2, 4}) {
    ChunkPipeline pipe(threads);
    std::atomic<int64_t> prepared{0}, running{0};
    auto prepare = [&](int64_t) {
      ++running;
      std::this_thread::sleep_for(100us);
      ++prepared;
      --running;
      return Status::Ok();
    };
    int64_t consumed = 0;
    auto consume = [&](int64_t i) {
      if (i == 10) return Status::NoSpace("store 10: no space");
      ++consumed;
      return Status::Ok();
    };
    Status s = RunBounded(pipe, 1000, prepare, consume);
    EXPECT_EQ(s.code(), Code::kNoSpace) << s.ToString();
    EXPECT_EQ(consumed, 10);
    EXPECT_EQ(running.load(), 0);
    // Nothing beyond the window past the failed index was prepared.
    EXPECT_LE(prepared.load(), 10 + pipe.window()) << threads << " threads";
  }
}

TEST(ChunkPipelineTest, ExceptionsBecomeInternalErrors) {
  ChunkPipeline pipe(2);
  Status s = RunBounded(
      pipe, 20,
      [](int64_t i) -> Status {
        if (i == 3) throw std::runtime_error("boom");
        return Status::Ok();
      },
      [](int64_t) { return Status::Ok(); });
  EXPECT_EQ(s.code(), Code::kInternal);
  EXPECT_NE(s.message().find("boom"), std::string::npos) << s.ToString();
  s = RunBounded(
      pipe, 20, [](int64_t) { return Status::Ok(); },
      [](int64_t i) -> Status {
        if (i == 4) throw std::bad_alloc();
        return Status::Ok();
      });
  EXPECT_EQ(s.code(), Code::kInternal) << s.ToString();
}

TEST(ChunkPipelineTest, SingleIndexAndEmptyRunsAreSerial) {
  ChunkPipeline pipe(4);
  std::thread::id prepared_on;
  ASSERT_TRUE(RunBounded(pipe, 0, [](int64_t) { return Status::Ok(); }, [](int64_t) { return Status::Ok(); }).ok());
  const auto caller = std::this_thread::get_id();
  auto f = std::async(std::launch::async, [&] {
    return std::make_pair(std::this_thread::get_id(),
                          pipe.Run(
                              1,
                              [&](int64_t) {
                                prepared_on = std::this_thread::get_id();
                                return Status::Ok();
                              },
                              [](int64_t) { return Status::Ok(); }));
  });
  auto [runner, s] = f.get();
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(prepared_on, runner);
  EXPECT_NE(runner, caller);
}

TEST(ChunkPipelineTest, ManyRunsWithRandomFailuresNeverHang) {
  ChunkPipeline pipe(3);
  std::mt19937 rng(7);
  for (int run = 0; run < 300; ++run) {
    const int64_t n = 1 + int64_t(rng() % 40);
    const int64_t bad_prepare = int64_t(rng() % 80), bad_consume = int64_t(rng() % 80);
    auto prepare = [&](int64_t i) {
      if (i % 5 == 0) std::this_thread::yield();
      return i == bad_prepare ? Status::IOError("p") : Status::Ok();
    };
    auto consume = [&](int64_t i) { return i == bad_consume ? Status::IOError("c") : Status::Ok(); };
    Status s = RunBounded(pipe, n, prepare, consume);
    const bool should_fail = bad_prepare < n || bad_consume < n;
    EXPECT_EQ(s.ok(), !should_fail) << "run " << run << ": " << s.ToString();
  }
}

}  // namespace
}  // namespace ckpt
