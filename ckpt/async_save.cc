#include "ckpt/async_save.h"

#include <chrono>
#include <cstring>
#include <thread>

namespace ckpt {

using Clock = std::chrono::steady_clock;

static double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

AsyncSaver::AsyncSaver(Comm* comm, AsyncSaveOptions opts) : comm_(comm), opts_(opts) {}

AsyncSaver::~AsyncSaver() {
  if (pending_.valid()) pending_.wait();
}

Status AsyncSaver::Snapshot(const ShardedStateDict& state) {
  snapshot_ = ShardedStateDict();
  if (!opts_.snapshot) {  // negative control: the live buffers themselves
    for (const TensorEntry& t : state.tensors()) snapshot_.AddTensor(t.meta, t.data);
  } else {
    buffers_.resize(state.tensors().size());
    for (size_t i = 0; i < state.tensors().size(); ++i) {
      const TensorEntry& t = state.tensors()[i];
      auto& buf = buffers_[i];
      if (buf.size() != t.data.size()) buf.resize(t.data.size());  // keeps capacity when shapes repeat
      std::memcpy(buf.data(), t.data.data(), t.data.size());
      snapshot_.AddTensor(t.meta, std::span<std::byte>(buf));
    }
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
    stats.previous_background_seconds = last_background_seconds_;
  }
  t0 = Clock::now();
  CKPT_RETURN_IF_ERROR(Snapshot(state));
  stats.snapshot_seconds = Since(t0);
  stats.snapshot_bytes = opts_.snapshot ? snapshot_.TotalBytes() : 0;
  opts.comm = comm_;
  background_seconds_ = 0;
  pending_ = std::async(std::launch::async, [this, opts = std::move(opts)]() {
    const auto b0 = Clock::now();
    if (opts_.delay_before_save.count() > 0) std::this_thread::sleep_for(opts_.delay_before_save);
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

}  // namespace ckpt
