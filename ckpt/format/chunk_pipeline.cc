// ChunkPipeline (chunk_pipeline.h): one mutex guards the running job's
// counters; `done` records, per slot, which index last finished preparing
// there, so the caller knows index i is ready when done[i % window] == i.
#include "ckpt/format/chunk_pipeline.h"

#include <algorithm>
#include <exception>
#include <string>
#include <system_error>

namespace ckpt {

struct ChunkPipeline::Job {
  int64_t n = 0;
  const Step* prepare = nullptr;
  int64_t next = 0;      // next index to hand out
  int64_t consumed = 0;  // indices whose consume returned OK
  int running = 0;       // prepares in progress
  std::vector<int64_t> done;
  Status error;          // first failure; stops handing out
};

namespace {

// Runs one step, turning an escaping exception into a Status.
Status Call(const ChunkPipeline::Step& step, int64_t index, const char* what) {
  try {
    return step(index);
  } catch (const std::exception& e) {
    return Status::Internal(std::string(what) + " of chunk " + std::to_string(index) + " threw: " + e.what());
  } catch (...) {
    return Status::Internal(std::string(what) + " of chunk " + std::to_string(index) + " threw");
  }
}

}  // namespace

ChunkPipeline::ChunkPipeline(int threads) : requested_(std::max(0, threads)) {
  for (int t = 0; t < requested_; ++t) {
    try {
      workers_.emplace_back([this] { WorkerLoop(); });
    } catch (const std::system_error&) {
      break;  // run with the workers we got (none: serial)
    }
  }
  window_ = std::max<int64_t>(1, 2 * int64_t(workers_.size()));
}

ChunkPipeline::~ChunkPipeline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& w : workers_) w.join();
}

int64_t ChunkPipeline::peak_in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

bool ChunkPipeline::CanHandOut() const {
  return job_ && job_->error.ok() && job_->next < job_->n && job_->next - job_->consumed < window_;
}

void ChunkPipeline::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stop_ || CanHandOut(); });
    if (stop_) return;
    Job& job = *job_;  // stays alive: Run waits for running == 0 before returning
    const int64_t i = job.next++;
    ++job.running;
    peak_ = std::max(peak_, job.next - job.consumed);
    lock.unlock();
    Status s = Call(*job.prepare, i, "preparing");
    lock.lock();
    --job.running;
    if (!s.ok() && job.error.ok()) job.error = std::move(s);
    job.done[size_t(i % window_)] = i;
    done_cv_.notify_all();
  }
}

Status ChunkPipeline::RunSerial(int64_t n, const Step& prepare, const Step& consume) {
  for (int64_t i = 0; i < n; ++i) {
    CKPT_RETURN_IF_ERROR(Call(prepare, i, "preparing"));
    CKPT_RETURN_IF_ERROR(Call(consume, i, "storing"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  peak_ = std::max<int64_t>(peak_, n > 0 ? 1 : 0);
  return Status::Ok();
}

Status ChunkPipeline::Run(int64_t n, const Step& prepare, const Step& consume) {
  if (workers_.empty() || n <= 1) return RunSerial(n, prepare, consume);
  Job job;
  job.n = n;
  job.prepare = &prepare;
  job.done.assign(size_t(window_), -1);
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &job;
  work_cv_.notify_all();
  for (int64_t i = 0; i < n; ++i) {
    const size_t slot = size_t(i % window_);
    done_cv_.wait(lock, [&] { return job.done[slot] == i || !job.error.ok(); });
    if (!job.error.ok()) break;
    lock.unlock();
    Status s = Call(consume, i, "storing");
    lock.lock();
    if (!s.ok()) {
      job.error = std::move(s);
      break;
    }
    ++job.consumed;
    work_cv_.notify_all();
  }
  // The running prepares read the caller's buffers and write its slots: wait for them.
  done_cv_.wait(lock, [&] { return job.running == 0; });
  job_ = nullptr;
  return job.error;
}

}  // namespace ckpt
