// TrainSaver with --local-dir and --async-save (train_saver.h): the local save
// blocks only for the snapshot into host memory; the write, the replication, the
// local commit and the global drain run on the saver's thread and are joined at
// the next save, at the end, and before --kill-at / --stall-at.
#include <chrono>

#include "ckpt/base/clock.h"
#include "cli/train_saver.h"

namespace ckpt::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

}  // namespace

Result<std::string> TrainSaver::SaveLocalAsync(workload::TrainWorkload& w, bool global) {
  const int64_t it = w.iteration();
  const auto t0 = Clock::now();
  CKPT_ASSIGN_OR_RETURN(std::string log, JoinLocal(it));
  const double wait = Since(t0);
  const auto t1 = Clock::now();
  const ShardedStateDict live = w.SaveDict(parts_);
  CKPT_RETURN_IF_ERROR(ReserveLocalSnapshot(live.TotalBytes()));
  local_sd_ = ShardedStateDict();
  std::vector<SnapshotCopy> copies;
  size_t off = 0;
  for (const auto& t : live.tensors()) {
    copies.push_back({local_snap_.data + off, t.data.data(), t.data.size()});
    local_sd_.AddTensor(t.meta, std::span<std::byte>(local_snap_.data + off, t.data.size()));
    off += t.data.size();
  }
  CKPT_RETURN_IF_ERROR(local_snap_.memory->CopyAll(copies).WithContext("local tier snapshot"));
  for (const auto& o : live.objects()) local_sd_.AddObject(o.meta, o.bytes);
  const double snap = Since(t1);
  LocalTierOptions lo = *local_;
  lo.comm = save_comm_.get();
  lo.pinned = -1;  // the previous drain was joined above
  std::function<Result<SaveStats>()> drain;
  if (global) drain = MakeDrain(w, save_comm_.get());
  rows_.push_back({{"tier", "local"},
                   {"iteration", it},
                   {"mode", "background"},
                   {"blocking_seconds", wait + snap},
                   {"wait_previous_seconds", wait},
                   {"snapshot_seconds", snap},
                   {"state_bytes", live.TotalBytes()}});
  local_row_ = int64_t(rows_.size()) - 1;
  if (global) {
    rows_.push_back({{"tier", "global"}, {"iteration", it}, {"drained_from", "local"}, {"mode", "background"}});
    local_drain_row_ = int64_t(rows_.size()) - 1;
  }
  local_bg_ = std::async(std::launch::async, [this, lo, it, drain]() {
    LocalJob job;
    const auto b0 = Clock::now();
    job.local = LocalSave(local_sd_, it, lo);
    if (job.local->ok() && drain) job.drain = drain();
    job.seconds = Since(b0);
    return job;
  });
  char line[200];
  std::snprintf(
      line, sizeof line, "train: local save of iteration %lld: blocked %.3f ms (snapshot %.3f ms), %s\n",
      static_cast<long long>(it), 1e3 * (wait + snap), 1e3 * snap,
      global ? "write, replication and the global drain in the background" : "write and replication in the background");
  return log + line;
}

Status TrainSaver::ReserveLocalSnapshot(int64_t bytes) {
  if (local_snap_.data && local_snap_.bytes >= size_t(bytes)) return Status::Ok();
  CKPT_RETURN_IF_ERROR(JoinLocal(-1).status());  // the snapshot in flight is the one replaced
  local_snap_ = {};
  local_snap_.memory = memory_ ? memory_.get() : HostSnapshotMemory();
  CKPT_ASSIGN_OR_RETURN(local_snap_.data, local_snap_.memory->Allocate(size_t(bytes)));
  local_snap_.bytes = size_t(bytes);
  return Status::Ok();
}

Result<std::string> TrainSaver::JoinLocal(int64_t iteration_now) {
  if (!local_bg_.valid()) return std::string();
  const auto t0 = Clock::now();
  LocalJob job = local_bg_.get();
  json& row = rows_[size_t(local_row_)];
  row["wait_seconds"] = Since(t0);
  row["background_seconds"] = job.seconds;
  const int64_t it = row["iteration"].get<int64_t>();
  CKPT_RETURN_IF_ERROR(job.local->status().WithContext("background local save of iteration " + std::to_string(it)));
  const LocalSaveStats& st = **job.local;
  row.update({{"write_seconds", st.write_seconds},
              {"replicate_seconds", st.replicate_seconds},
              {"commit_seconds", st.commit_seconds},
              {"save_seconds", st.seconds},
              {"own_bytes", st.own_bytes},
              {"network_bytes_sent", st.sent_bytes},
              {"network_bytes_received", st.received_bytes},
              {"buffer_bytes", st.buffer_bytes},
              {"steps_until_join", iteration_now - it}});
  std::string log = "train: local save of iteration " + std::to_string(it) + " committed on " +
                    std::to_string(local_->replicas) + " replica(s) in the background\n";
  if (!job.drain) return log;
  json& g = rows_[size_t(local_drain_row_)];
  CKPT_RETURN_IF_ERROR(job.drain->status());
  g.update({{"save_seconds", (*job.drain)->seconds},
            {"rank0_bytes", (*job.drain)->bytes_written},
            {"steps_until_join", iteration_now - it}});
  return log + "train: global save of iteration " + std::to_string(it) + " committed under " + base_.root + "\n" +
         Retain(**job.drain);
}

Result<std::string> TrainSaver::JoinDrain(int64_t iteration_now) {
  if (!drain_.valid()) return std::string();
  const auto t0 = Clock::now();
  Result<SaveStats> st = drain_.get();
  json& row = rows_[size_t(drain_row_)];
  row["wait_seconds"] = Since(t0);
  CKPT_RETURN_IF_ERROR(st.status());
  row["save_seconds"] = st->seconds;
  row["rank0_bytes"] = st->bytes_written;
  row["steps_until_join"] = iteration_now - row["iteration"].get<int64_t>();
  return "train: global save of iteration " + row["iteration"].dump() + " committed under " + base_.root + "\n" +
         Retain(*st);
}

// Retention after a committed global save (rank 0), one line for the log.

}  // namespace ckpt::cli
