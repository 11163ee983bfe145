#include "ckpt/protocol/async_save.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

#include "ckpt/base/clock.h"

namespace ckpt {

using Clock = std::chrono::steady_clock;

// Offset of every tensor in the arena, and the arena bytes (ArenaBytes).
static std::vector<size_t> ArenaOffsets(const ShardedStateDict& state, size_t* total) {
  std::vector<size_t> offsets;
  offsets.reserve(state.tensors().size());
  size_t end = 0;
  const std::byte* prev_end = nullptr;
  for (const TensorEntry& t : state.tensors()) {
    const bool follows = prev_end != nullptr && t.data.data() == prev_end;
    const size_t off = follows ? end : (end + 63) / 64 * 64;
    offsets.push_back(off);
    end = off + t.data.size();
    prev_end = t.data.data() + t.data.size();
  }
  *total = end;
  return offsets;
}

int64_t AsyncSaver::ArenaBytes(const ShardedStateDict& state) {
  size_t total = 0;
  ArenaOffsets(state, &total);
  return int64_t(total);
}

AsyncSaver::AsyncSaver(Comm* comm, AsyncSaveOptions opts)
    : comm_(comm), opts_(opts), memory_(opts.memory ? opts.memory : HostSnapshotMemory()) {}

AsyncSaver::~AsyncSaver() {
  if (pending_.valid()) pending_.wait();
  if (arena_.data) memory_->Free(arena_.data, arena_.bytes);
}

Status AsyncSaver::GrowArena(size_t bytes) {
  if (arena_.data && arena_.bytes >= bytes) return Status::Ok();
  if (arena_.data) memory_->Free(arena_.data, arena_.bytes);
  arena_ = Buffer{};
  CKPT_ASSIGN_OR_RETURN(arena_.data, memory_->Allocate(bytes));
  arena_.bytes = bytes;
  ++arena_allocations_;
  return Status::Ok();
}

Status AsyncSaver::Reserve(int64_t bytes) {
  if (bytes < 0) return Status::InvalidArgument("async save reserve: negative size " + std::to_string(bytes));
  if (pending_.valid()) CKPT_RETURN_IF_ERROR(Wait().status().WithContext("previous async save"));
  return GrowArena(size_t(bytes));
}

Status AsyncSaver::Snapshot(const ShardedStateDict& state, double* allocate_seconds) {
  snapshot_ = ShardedStateDict();
  if (!copy_snapshot_) {  // negative control (testing::AsyncSaveControls): the live buffers themselves
    for (const TensorEntry& t : state.tensors()) snapshot_.AddTensor(t.meta, t.data);
  } else {
    size_t total = 0;
    const std::vector<size_t> offsets = ArenaOffsets(state, &total);
    const auto t0 = Clock::now();
    const int allocations = arena_allocations_;
    CKPT_RETURN_IF_ERROR(GrowArena(total));
    if (arena_allocations_ != allocations) *allocate_seconds = Since(t0);
    std::vector<SnapshotCopy> copies;
    copies.reserve(offsets.size());
    for (size_t i = 0; i < offsets.size(); ++i) {
      const TensorEntry& t = state.tensors()[i];
      std::byte* dst = arena_.data + offsets[i];
      copies.push_back({dst, t.data.data(), t.data.size()});
      snapshot_.AddTensor(t.meta, std::span<std::byte>(dst, t.data.size()));
    }
    CKPT_RETURN_IF_ERROR(memory_->CopyAll(copies).WithContext("snapshot (" + std::string(memory_->name()) + " memory)"));
  }
  for (const ObjectEntry& o : state.objects()) snapshot_.AddObject(o.meta, o.bytes);
  return snapshot_.Validate();
}

Result<AsyncStartStats> AsyncSaver::Start(const ShardedStateDict& state, SaveOptions opts) {
  AsyncStartStats stats;
  auto t0 = Clock::now();
  if (pending_.valid()) {
    Result<SaveStats> previous = Wait();
    stats.wait_previous_seconds = Since(t0);
    if (!previous.ok()) return previous.status().WithContext("previous async save");
    stats.joined_previous = true;
    stats.previous = *std::move(previous);
  }
  t0 = Clock::now();
  CKPT_RETURN_IF_ERROR(Snapshot(state, &stats.allocate_seconds));
  stats.snapshot_seconds = Since(t0);
  stats.snapshot_bytes = copy_snapshot_ ? snapshot_.TotalBytes() : 0;
  opts.comm = comm_;
  background_seconds_ = 0;
  pending_ = std::async(std::launch::async, [this, opts = std::move(opts)]() {
    const auto b0 = Clock::now();
    if (before_save_) before_save_();  // harness hook (testing::AsyncSaveControls)
    save_began_ = Clock::now();
    Result<SaveStats> r = SaveCheckpoint(snapshot_, opts);
    background_seconds_ = Since(b0);
    return r;
  });
  return stats;
}

Result<SaveStats> AsyncSaver::Wait() {
  if (!pending_.valid()) return Status::FailedPrecondition("no async save in flight");
  Result<SaveStats> r = pending_.get();
  last_background_seconds_ = background_seconds_;
  last_save_began_ = save_began_;
  return r;
}

Result<double> MedianStateMemcpySeconds(const ShardedStateDict& state, std::span<std::byte> dst, int reps,
                                        Comm* comm, Millis timeout) {
  std::vector<double> runs;
  for (int rep = 0; rep < reps; ++rep) {
    if (comm) CKPT_RETURN_IF_ERROR(comm->Barrier(timeout, Phase::kMemcpyBaseline));
    const auto t0 = Clock::now();
    size_t off = 0;
    for (const TensorEntry& t : state.tensors()) {
      std::memcpy(dst.data() + off, t.data.data(), t.data.size());
      off += t.data.size();
    }
    runs.push_back(Since(t0));
  }
  if (runs.empty()) return 0.0;
  std::nth_element(runs.begin(), runs.begin() + runs.size() / 2, runs.end());
  return runs[runs.size() / 2];
}

}  // namespace ckpt
