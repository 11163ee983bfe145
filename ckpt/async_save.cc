#include "ckpt/async_save.h"

#include <chrono>
#include <cstring>

namespace ckpt {

using Clock = std::chrono::steady_clock;

static double Since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

AsyncSaver::AsyncSaver(Comm* comm) : comm_(comm) {}

AsyncSaver::~AsyncSaver() {
  if (pending_.valid()) pending_.wait();
}

Status AsyncSaver::Snapshot(const ShardedStateDict& state) {
  snapshot_ = ShardedStateDict();
  buffers_.resize(state.tensors().size());
  for (size_t i = 0; i < state.tensors().size(); ++i) {
    const TensorEntry& t = state.tensors()[i];
    auto& buf = buffers_[i];
    if (buf.size() != t.data.size()) buf.resize(t.data.size());  // keeps capacity when shapes repeat
    std::memcpy(buf.data(), t.data.data(), t.data.size());
    snapshot_.AddTensor(t.meta, std::span<std::byte>(buf));
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
  }
  t0 = Clock::now();
  CKPT_RETURN_IF_ERROR(Snapshot(state));
  stats.snapshot_seconds = Since(t0);
  stats.snapshot_bytes = snapshot_.TotalBytes();
  opts.comm = comm_;
  pending_ = std::async(std::launch::async, [this, opts = std::move(opts)]() { return SaveCheckpoint(snapshot_, opts); });
  return stats;
}

Result<SaveStats> AsyncSaver::Wait() {
  if (!pending_.valid()) return Status::FailedPrecondition("no async save in flight");
  return pending_.get();
}

}  // namespace ckpt
