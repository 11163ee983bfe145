#include "ckpt/protocol/async_save.h"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>

namespace ckpt {

using Clock = std::chrono::steady_clock;

static double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

SnapshotMemory* HostSnapshotMemory() {
  class Host final : public SnapshotMemory {
   public:
    std::string_view name() const override { return "host"; }
    // Buffers of 2 MiB and more are 2 MiB aligned and advised as huge pages
    // (THP in madvise mode): fewer TLB misses in the snapshot copy, which is
    // all the training thread waits for.
    Result<std::byte*> Allocate(size_t bytes) override {
      constexpr size_t kHuge = size_t(2) << 20;
      void* p = nullptr;
      if (posix_memalign(&p, bytes >= kHuge ? kHuge : alignof(std::max_align_t), bytes == 0 ? 1 : bytes) != 0)
        return Status::NoSpace("snapshot: out of host memory allocating " + std::to_string(bytes) + " bytes");
      if (bytes >= kHuge) madvise(p, bytes, MADV_HUGEPAGE);  // advisory: a kernel without THP ignores it
      return static_cast<std::byte*>(p);
    }
    void Free(std::byte* p, size_t) override { std::free(p); }
    Status CopyAll(std::span<const SnapshotCopy> copies) override {
      for (const SnapshotCopy& c : copies) std::memcpy(c.dst, c.src, c.bytes);
      return Status::Ok();
    }
  };
  static Host* host = new Host;  // stateless; never destroyed (outlives every saver)
  return host;
}

AsyncSaver::AsyncSaver(Comm* comm, AsyncSaveOptions opts)
    : comm_(comm), opts_(opts), memory_(opts.memory ? opts.memory : HostSnapshotMemory()) {}

AsyncSaver::~AsyncSaver() {
  if (pending_.valid()) pending_.wait();
  for (Buffer& b : buffers_) memory_->Free(b.data, b.bytes);
}

Status AsyncSaver::Snapshot(const ShardedStateDict& state) {
  snapshot_ = ShardedStateDict();
  if (!copy_snapshot_) {  // negative control (testing::AsyncSaveControls): the live buffers themselves
    for (const TensorEntry& t : state.tensors()) snapshot_.AddTensor(t.meta, t.data);
  } else {
    // Buffers are kept across saves and reallocated only when a size changes.
    for (size_t i = state.tensors().size(); i < buffers_.size(); ++i) memory_->Free(buffers_[i].data, buffers_[i].bytes);
    buffers_.resize(state.tensors().size());
    std::vector<SnapshotCopy> copies;
    copies.reserve(buffers_.size());
    for (size_t i = 0; i < buffers_.size(); ++i) {
      const TensorEntry& t = state.tensors()[i];
      Buffer& b = buffers_[i];
      if (b.bytes != t.data.size() || !b.data) {
        memory_->Free(b.data, b.bytes);
        b = Buffer{};
        CKPT_ASSIGN_OR_RETURN(b.data, memory_->Allocate(t.data.size()));
        b.bytes = t.data.size();
      }
      copies.push_back({b.data, t.data.data(), t.data.size()});
      snapshot_.AddTensor(t.meta, std::span<std::byte>(b.data, b.bytes));
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
  CKPT_RETURN_IF_ERROR(Snapshot(state));
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
    if (comm) CKPT_RETURN_IF_ERROR(comm->Barrier(timeout, "memcpy baseline"));
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
