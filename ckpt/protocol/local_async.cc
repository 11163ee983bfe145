#include "ckpt/protocol/local_async.h"

#include <vector>

#include "ckpt/base/clock.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;

// Each tensor's offset in the arena: 64-byte aligned (full-line streaming
// stores), except right after the previous tensor when its source follows
// the previous source (then both copy as one block, as AsyncSaver's arena).
std::vector<size_t> Offsets(const ShardedStateDict& state, size_t* total) {
  std::vector<size_t> offsets;
  size_t end = 0;
  const std::byte* prev_end = nullptr;
  for (const TensorEntry& t : state.tensors()) {
    const size_t off = t.data.data() == prev_end ? end : (end + 63) / 64 * 64;
    offsets.push_back(off);
    end = off + t.data.size();
    prev_end = t.data.data() + t.data.size();
  }
  *total = end;
  return offsets;
}

// The job: the local save of the snapshot, then (when due) the global save
// from the committed local copy, read back into the snapshot's own buffers.
Result<LocalJobStats> RunJob(ShardedStateDict& snapshot, int64_t iteration, const LocalTierOptions& local,
                             std::optional<SaveOptions> drain) {
  const auto t0 = Clock::now();
  LocalJobStats job;
  job.iteration = iteration;
  auto saved = LocalSave(snapshot, iteration, local);
  if (!saved.ok()) return saved.status().WithContext("background local save of iteration " + std::to_string(iteration));
  job.local = *saved;
  if (drain) {
    const int rank = local.comm ? local.comm->rank() : 0;
    LoadOptions from;
    from.root = JoinPath(local.NodeDir(local.node_of(rank)), "rank_" + std::to_string(rank));
    from.iteration = iteration;
    from.env = local.env;
    from.timeout = local.timeout;
    drain->iteration = iteration;
    auto drained = DrainLocalCopy(snapshot, from, *drain, "reading the local tier " + from.root);
    if (!drained.ok())
      return drained.status().WithContext("background global drain of iteration " + std::to_string(iteration) + " to " +
                                          drain->root);
    job.drain = *drained;
    job.drained = true;
    job.drained_from = from.root;
  }
  job.background_seconds = Since(t0);
  return job;
}

}  // namespace

AsyncLocalSaver::AsyncLocalSaver(SnapshotMemory* memory) : memory_(memory ? memory : HostSnapshotMemory()) {}

AsyncLocalSaver::~AsyncLocalSaver() {
  if (pending_.valid()) pending_.wait();
  if (arena_) memory_->Free(arena_, arena_bytes_);
}

Status AsyncLocalSaver::Grow(size_t bytes, double* seconds) {
  if (arena_ && arena_bytes_ >= bytes) return Status::Ok();
  const auto t0 = Clock::now();
  if (arena_) memory_->Free(arena_, arena_bytes_);
  arena_ = nullptr;
  arena_bytes_ = 0;
  CKPT_ASSIGN_OR_RETURN(arena_, memory_->Allocate(bytes));
  arena_bytes_ = bytes;
  *seconds = Since(t0);
  return Status::Ok();
}

int64_t AsyncLocalSaver::ArenaBytes(const ShardedStateDict& state) {
  size_t total = 0;
  Offsets(state, &total);
  return int64_t(total);
}

Status AsyncLocalSaver::Reserve(int64_t bytes) {
  if (bytes < 0) return Status::InvalidArgument("local tier snapshot reserve: negative size " + std::to_string(bytes));
  if (pending_.valid()) CKPT_RETURN_IF_ERROR(Wait().status());
  double unused = 0;
  return Grow(size_t(bytes), &unused).WithContext("local tier snapshot");
}

Status AsyncLocalSaver::Snapshot(const ShardedStateDict& live, LocalStartStats* st) {
  size_t total = 0;
  const std::vector<size_t> offsets = Offsets(live, &total);
  CKPT_RETURN_IF_ERROR(Grow(total, &st->allocate_seconds).WithContext("local tier snapshot"));
  snapshot_ = ShardedStateDict();
  std::vector<SnapshotCopy> copies;
  copies.reserve(offsets.size());
  for (size_t i = 0; i < offsets.size(); ++i) {
    const TensorEntry& t = live.tensors()[i];
    copies.push_back({arena_ + offsets[i], t.data.data(), t.data.size()});
    snapshot_.AddTensor(t.meta, std::span<std::byte>(arena_ + offsets[i], t.data.size()));
  }
  CKPT_RETURN_IF_ERROR(memory_->CopyAll(copies).WithContext("local tier snapshot"));
  for (const ObjectEntry& o : live.objects()) snapshot_.AddObject(o.meta, o.bytes);
  st->snapshot_bytes = live.TotalBytes();
  return snapshot_.Validate();
}

Result<LocalStartStats> AsyncLocalSaver::Start(const ShardedStateDict& live, int64_t iteration,
                                               const LocalTierOptions& local, std::optional<SaveOptions> drain) {
  LocalStartStats st;
  auto t0 = Clock::now();
  if (pending_.valid()) {
    CKPT_ASSIGN_OR_RETURN(st.previous, Wait());
    st.wait_previous_seconds = Since(t0);
  }
  t0 = Clock::now();
  CKPT_RETURN_IF_ERROR(Snapshot(live, &st));
  st.snapshot_seconds = Since(t0);
  pending_ = std::async(std::launch::async, [this, iteration, local, drain = std::move(drain)]() {
    return RunJob(snapshot_, iteration, local, drain);
  });
  return st;
}

Result<LocalJobStats> AsyncLocalSaver::Wait() {
  if (!pending_.valid()) return Status::FailedPrecondition("no background local save in flight");
  return pending_.get();
}

}  // namespace ckpt
