#include "cli/train_saver.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "ckpt/base/clock.h"
#include "ckpt/gpu/gpu.h"
#include "ckpt/workload/rank_report.h"
#include "cli/harness_seam.h"

namespace ckpt::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// memcpy of the state's tensor bytes into one buffer: `cold` the first copy
// into freshly allocated, untouched memory (as the first snapshot, which
// allocates its buffers), `warm` the median of 5 copies into the same buffer
// afterwards (as later snapshots, which reuse them).
struct MemcpyBaseline {
  double cold = 0, warm = 0;
  int64_t bytes = 0;
};
MemcpyBaseline MeasureMemcpy(const ShardedStateDict& sd) {
  MemcpyBaseline b;
  b.bytes = sd.TotalBytes();
  std::unique_ptr<std::byte[]> dst(new std::byte[size_t(std::max<int64_t>(b.bytes, 1))]);
  const std::span<std::byte> buf(dst.get(), size_t(b.bytes));
  b.cold = *MedianStateMemcpySeconds(sd, buf, 1);  // no communicator: cannot fail
  b.warm = *MedianStateMemcpySeconds(sd, buf, 5);
  return b;
}

std::string Ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", 1e3 * s);
  return buf;
}

}  // namespace

Result<std::unique_ptr<TrainSaver>> TrainSaver::Create(const TrainSaveFlags& f, const MpiSession& session,
                                                       MpiComm& job, const std::string& root) {
  if (!f.async && (f.no_snapshot || f.delay_ms > 0))
    return Status::InvalidArgument("--async-no-snapshot and --async-delay-ms need --async-save");
  if (f.delay_ms < 0) return Status::InvalidArgument("--async-delay-ms must be >= 0");
  if (f.snapshot_memory != "host" && f.snapshot_memory != "pinned")
    return Status::InvalidArgument("--snapshot-memory must be host or pinned, not '" + f.snapshot_memory + "'");
  if (!f.async && f.snapshot_memory != "host") return Status::InvalidArgument("--snapshot-memory needs --async-save");
  CKPT_RETURN_IF_ERROR(ValidateRetention(f.retention));
  std::unique_ptr<TrainSaver> s(new TrainSaver(f, &job));
  if (!f.faults.empty()) {
    if (!Harness().fault_env) return NoHarness("--faults");
    CKPT_ASSIGN_OR_RETURN(s->faulted_, Harness().fault_env(DefaultEnv(), FaultRequest{f.faults, job.rank(), root,
                                                                                      f.faults_log}));
  }
  if (!f.async) return s;
  if (!session.thread_multiple())
    return Status::FailedPrecondition(
        "--async-save needs MPI_THREAD_MULTIPLE (the background save's collectives run while the training "
        "thread's all-reduces do), but this MPI provides thread level " +
        std::to_string(session.thread_level()) + " (MPI_THREAD_MULTIPLE is " +
        std::to_string(MPI_THREAD_MULTIPLE) + ")");
  CKPT_ASSIGN_OR_RETURN(s->save_comm_, MpiComm::Create(MPI_COMM_WORLD));
  AsyncSaveOptions ao;
  if (f.snapshot_memory == "pinned") {
    CKPT_ASSIGN_OR_RETURN(s->memory_, gpu::MakePinnedSnapshotMemory());
    ao.memory = s->memory_.get();
  }
  s->saver_ = std::make_unique<AsyncSaver>(s->save_comm_.get(), ao);
  // ckpt-lab's switches: the harness's controls (cli/harness_seam.h), not product API.
  if (f.no_snapshot || f.delay_ms > 0) {
    if (!Harness().async_controls) return NoHarness("--async-no-snapshot/--async-delay-ms");
    Harness().async_controls(*s->saver_, f.no_snapshot, Millis(f.delay_ms));
  }
  return s;
}

void TrainSaver::OnStep() {
  if (pending_row_ >= 0) steps_.push_back(Clock::now());
}

std::string TrainSaver::Joined(const SaveStats& st, int64_t iteration_now) {
  json& row = rows_[size_t(pending_row_)];
  const double background_s = saver_->last_background_seconds();
  const auto began = saver_->last_save_began();
  const int64_t before_read = std::count_if(steps_.begin(), steps_.end(), [&](auto t) { return t < began; });
  row["background_seconds"] = background_s;
  row["save_seconds"] = st.seconds;
  row["rank0_bytes"] = st.bytes_written;
  row["steps_before_read"] = before_read;
  row["steps_until_join"] = iteration_now - started_at_;
  pending_row_ = -1;
  steps_.clear();
  char line[256];
  std::snprintf(line, sizeof line,
                "train: async save of iteration %lld committed: %.3f s in the background; %lld training steps "
                "ended before it began reading, %lld before the join\n",
                static_cast<long long>(row["iteration"].get<int64_t>()), background_s,
                static_cast<long long>(before_read), static_cast<long long>(iteration_now - started_at_));
  return line + Retain(st);
}

std::unique_ptr<CliProgress> TrainSaver::Meter(const char* op, const ShardedStateDict& sd, Env** env,
                                               bool start) const {
  auto p = std::make_unique<CliProgress>(op, flags_.json, flags_.no_progress, job_->rank(),
                                         *env ? *env : DefaultEnv(), /*count_writes=*/true, ".h5", start);
  p->SetTotals(sd.TotalBytes(), 1);  // this rank's raw bytes, one shard file
  *env = p->env();
  return p;
}

Result<std::string> TrainSaver::Save(const ShardedStateDict& sd, SaveOptions o, int64_t iteration_now) {
  if (faulted_.env) {
    o.env = faulted_.env.get();
    o.hook = faulted_.hook;
  }
  if (!saver_) {
    o.comm = job_;
    std::unique_ptr<CliProgress> progress = Meter("save", sd, &o.env, /*start=*/true);
    Result<SaveStats> saved = SaveCheckpoint(sd, o);
    progress->Finish();
    CKPT_ASSIGN_OR_RETURN(SaveStats st, std::move(saved));
    rows_.push_back({{"iteration", o.iteration}, {"seconds", st.seconds}, {"rank0_bytes", st.bytes_written}});
    return "train: saved iteration " + std::to_string(o.iteration) + " under " + o.root + "\n" + Retain(st);
  }
  const int64_t iteration = o.iteration;
  // Reports once the previous save (joined by Start) has printed its final line.
  std::unique_ptr<CliProgress> progress = Meter("async_save", sd, &o.env, /*start=*/false);
  Result<AsyncStartStats> started = saver_->Start(sd, std::move(o));  // joins the previous save first
  if (async_progress_) async_progress_->Finish();  // the previous save's final line
  async_progress_ = started.ok() ? std::move(progress) : nullptr;
  if (async_progress_) async_progress_->Start();
  CKPT_ASSIGN_OR_RETURN(AsyncStartStats st, std::move(started));
  std::string log;
  if (st.joined_previous) log = Joined(st.previous, iteration_now);
  rows_.push_back({{"iteration", iteration}, {"mode", !flags_.no_snapshot ? "async" : "async-no-snapshot"},
                   {"wait_previous_seconds", st.wait_previous_seconds}, {"snapshot_seconds", st.snapshot_seconds},
                   {"allocate_seconds", st.allocate_seconds},
                   {"blocking_seconds", st.blocking_seconds()}, {"snapshot_bytes", st.snapshot_bytes},
                   {"state_bytes", sd.TotalBytes()}, {"delay_ms", flags_.delay_ms}});
  pending_row_ = int64_t(rows_.size()) - 1;
  started_at_ = iteration_now;
  return log + "train: started async save of iteration " + std::to_string(iteration) + ": blocked " +
         Ms(st.blocking_seconds()) + " (wait for the previous " + Ms(st.wait_previous_seconds) + " + snapshot " +
         Ms(st.snapshot_seconds) + " of " + std::to_string(st.snapshot_bytes) + " bytes)\n";
}

Status TrainSaver::Prepare(SaveOptions base, workload::ResumeParts parts, workload::TrainWorkload& w) {
  base_ = std::move(base);
  parts_ = parts;
  if (!flags_.local_dir.empty()) {
    CKPT_RETURN_IF_ERROR(PrepareLocal());
    // --async-save: the local snapshot's host buffer, allocated and faulted
    // in now, so the first local save blocks for the copy only.
    if (saver_) CKPT_RETURN_IF_ERROR(ReserveLocalSnapshot(w.SaveDict(parts_).TotalBytes()));
    return Status::Ok();
  }
  if (!saver_) return Status::Ok();
  const auto t0 = Clock::now();
  CKPT_RETURN_IF_ERROR(saver_->Reserve(AsyncSaver::ArenaBytes(w.SaveDict(parts_))).WithContext("async save arena"));
  reserve_seconds_ = Since(t0);
  return Status::Ok();
}

Result<json> TrainSaver::Report(const ShardedStateDict& sd, Millis timeout) {
  json out = {{"saves", rows_}};
  if (!saver_) return out;
  // Every rank's blocking seconds per save; rank 0 reports the worst rank's too.
  json mine = json::array();
  for (const json& r : rows_) mine.push_back(r.value("blocking_seconds", 0.0));
  CKPT_ASSIGN_OR_RETURN(auto all, workload::AllGatherJson(*job_, mine, timeout, Phase::kTrainReport));
  for (size_t i = 0; i < rows_.size(); ++i) {
    double worst = 0;
    for (size_t r = 0; r < all.size(); ++r) {
      if (!all[r].is_array() || all[r].size() != rows_.size() || !all[r][i].is_number())
        return Status::Internal("rank " + std::to_string(r) + " sent a malformed train report");
      worst = std::max(worst, all[r][i].get<double>());
    }
    out["saves"][i]["blocking_seconds_max_over_ranks"] = worst;
  }
  const MemcpyBaseline b = MeasureMemcpy(sd);
  out["memcpy_baseline"] = {{"bytes", b.bytes}, {"cold_seconds", b.cold}, {"warm_seconds", b.warm}};
  out["async"] = {{"snapshot", !flags_.no_snapshot}, {"delay_ms", flags_.delay_ms},
                  {"snapshot_memory", flags_.snapshot_memory},
                  {"arena_bytes", saver_->arena_capacity()}, {"reserve_seconds", reserve_seconds_},
                  {"dedicated_comm", true}, {"mpi_thread_multiple", true}};
  return out;
}

}  // namespace ckpt::cli
