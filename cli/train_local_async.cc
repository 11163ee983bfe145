// TrainSaver with --local-dir and --async-save (train_saver.h): the local save
// blocks only for the snapshot into host memory (AsyncLocalSaver's arena, from
// the async saver's SnapshotMemory: allocated and faulted in at Prepare); the
// write, the replication, the local commit and the global drain (read back
// from the committed local copy into that arena) run on its thread, on the
// saver's own communicator, and are joined at the next save, at the end, and
// before --kill-at / --stall-at. The same AsyncLocalSaver as Python's
// TieredCheckpointer.
#include <chrono>

#include "ckpt/base/clock.h"
#include "ckpt/protocol/stats_json.h"
#include "cli/train_saver.h"

namespace ckpt::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

}  // namespace

Result<std::string> TrainSaver::SaveLocalAsync(workload::TrainWorkload& w, bool global) {
  const int64_t it = w.iteration();
  CKPT_ASSIGN_OR_RETURN(std::string log, JoinLocal(it));
  LocalTierOptions lo = *local_;
  lo.comm = save_comm_.get();
  lo.pinned = -1;  // the previous drain was joined above
  std::optional<SaveOptions> drain;
  if (global) {
    drain = base_;
    if (faulted_.env) drain->env = faulted_.env.get(), drain->hook = faulted_.hook;
    drain->comm = save_comm_.get();
  }
  const ShardedStateDict live = w.SaveDict(parts_);
  CKPT_ASSIGN_OR_RETURN(LocalStartStats st, local_async_->Start(live, it, lo, std::move(drain)));
  rows_.push_back({{"tier", "local"},
                   {"iteration", it},
                   {"mode", "background"},
                   {"blocking_seconds", st.blocking_seconds()},
                   {"wait_previous_seconds", st.wait_previous_seconds},
                   {"snapshot_seconds", st.snapshot_seconds},
                   {"state_bytes", live.TotalBytes()}});
  local_row_ = int64_t(rows_.size()) - 1;
  if (global) {
    rows_.push_back({{"tier", "global"}, {"iteration", it}, {"drained_from", "local"}, {"mode", "background"}});
    local_drain_row_ = int64_t(rows_.size()) - 1;
  }
  char line[200];
  std::snprintf(
      line, sizeof line, "train: local save of iteration %lld: blocked %.3f ms (snapshot %.3f ms), %s\n",
      static_cast<long long>(it), 1e3 * st.blocking_seconds(), 1e3 * st.snapshot_seconds,
      global ? "write, replication and the global drain in the background" : "write and replication in the background");
  return log + line;
}

Result<std::string> TrainSaver::JoinLocal(int64_t iteration_now) {
  if (!local_async_ || !local_async_->in_flight()) return std::string();
  const auto t0 = Clock::now();
  Result<LocalJobStats> job = local_async_->Wait();
  json& row = rows_[size_t(local_row_)];
  row["wait_seconds"] = Since(t0);
  CKPT_RETURN_IF_ERROR(job.status());
  const int64_t it = job->iteration;
  const LocalSaveStats& st = job->local;
  row.update(LocalSaveStatsJson(st));
  row.update({{"background_seconds", job->background_seconds},
              {"save_seconds", st.seconds},
              {"steps_until_join", iteration_now - it}});
  std::string log = "train: local save of iteration " + std::to_string(it) + " committed on " +
                    std::to_string(local_->replicas) + " replica(s) in the background\n";
  if (!job->drained) return log;
  json& g = rows_[size_t(local_drain_row_)];
  g.update({{"save_seconds", job->drain.seconds},
            {"rank0_bytes", job->drain.bytes_written},
            {"steps_until_join", iteration_now - it}});
  return log + "train: global save of iteration " + std::to_string(it) + " committed under " + base_.root + "\n" +
         Retain(job->drain);
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

}  // namespace ckpt::cli
