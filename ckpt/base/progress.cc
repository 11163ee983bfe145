// Progress, ProgressThrottle, ProgressReporter, MeterEnv: see progress.h.
#include "ckpt/base/progress.h"

#include <algorithm>
#include <cstdlib>

#include "ckpt/base/clock.h"

namespace ckpt {

std::chrono::milliseconds ProgressIntervalFromEnvironment() {
  const char* v = std::getenv("CKPT_PROGRESS_INTERVAL_MS");
  const long ms = v ? std::strtol(v, nullptr, 10) : 0;
  return std::chrono::milliseconds(ms > 0 ? ms : 500);
}

double ProgressRate(int64_t bytes_done, double elapsed_s) {
  return elapsed_s > 0 ? double(bytes_done) / elapsed_s : 0.0;
}

double ProgressEta(int64_t bytes_done, int64_t bytes_total, double elapsed_s) {
  const double rate = ProgressRate(bytes_done, elapsed_s);
  if (bytes_total <= 0 || rate <= 0) return -1;
  return double(std::max<int64_t>(bytes_total - bytes_done, 0)) / rate;
}

void Progress::SetPhase(std::string phase) {
  std::lock_guard<std::mutex> lock(mu_);
  phase_ = std::move(phase);
}

ProgressSnapshot Progress::Snapshot(Clock::time_point now, bool final) const {
  ProgressSnapshot s;
  s.op = op_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s.phase = phase_;
  }
  s.bytes_done = bytes_done();
  s.files_done = files_done();
  const int64_t bt = bytes_total_.load(std::memory_order_relaxed), ft = files_total_.load(std::memory_order_relaxed);
  // A total is an estimate: never below done; the final snapshot says where it ended.
  s.bytes_total = final ? s.bytes_done : bt > 0 ? std::max(bt, s.bytes_done) : 0;
  s.files_total = final ? s.files_done : ft > 0 ? std::max(ft, s.files_done) : 0;
  s.elapsed_s = std::max(0.0, SecondsBetween(start_, now));
  s.rate = ProgressRate(s.bytes_done, s.elapsed_s);
  s.eta_s = final ? 0.0 : ProgressEta(s.bytes_done, s.bytes_total, s.elapsed_s);
  s.final = final;
  return s;
}

bool ProgressThrottle::Due(const ProgressSnapshot& s, Progress::Clock::time_point now) {
  const bool moved = s.bytes_done != bytes_ || s.files_done != files_ || s.phase != phase_;
  if (!s.final && (!moved || (any_ && now - last_ < interval_))) return false;
  any_ = true;
  last_ = now;
  bytes_ = s.bytes_done;
  files_ = s.files_done;
  phase_ = s.phase;
  return true;
}

ProgressReporter::ProgressReporter(Progress* progress, ProgressSink* sink, std::chrono::milliseconds interval)
    : progress_(progress), sink_(sink), throttle_(interval), interval_(interval), thread_([this] { Loop(); }) {}

void ProgressReporter::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, interval_, [this] { return stop_; });  // bounded: wakes every interval
    if (stop_) break;
    const auto now = Progress::Clock::now();
    ProgressSnapshot s = progress_->Snapshot(now);
    if (!throttle_.Due(s, now)) continue;
    lock.unlock();  // the sink may be slow (a Python callback); Finish must not wait on mu_ for it
    sink_->OnProgress(s);
    lock.lock();
  }
}

void ProgressReporter::Finish() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  sink_->OnProgress(progress_->Snapshot(Progress::Clock::now(), /*final=*/true));
}

namespace {

// Counts the bytes each PRead/PWrite moved; reports the file once on Close.
class MeterFile final : public FileWrapper {
 public:
  MeterFile(MeterEnv* env, std::unique_ptr<File> f) : FileWrapper(std::move(f)), env_(env) {}
  ~MeterFile() override { Done(); }
  Result<size_t> PRead(uint64_t offset, std::span<std::byte> dst) override {
    Result<size_t> r = target()->PRead(offset, dst);
    if (r.ok() && env_->reads() && *r > 0) {
      env_->progress()->AddBytes(int64_t(*r));
      moved_.store(true, std::memory_order_relaxed);
    }
    return r;
  }
  Status PWrite(uint64_t offset, std::span<const std::byte> src) override {
    Status st = target()->PWrite(offset, src);
    if (st.ok() && env_->writes() && !src.empty()) {
      env_->progress()->AddBytes(int64_t(src.size()));
      moved_.store(true, std::memory_order_relaxed);
    }
    return st;
  }
  Status Close() override {
    Status st = target()->Close();
    Done();
    return st;
  }

 private:
  void Done() {
    if (moved_.exchange(false)) env_->FileDone(target()->path());
  }
  MeterEnv* env_;
  std::atomic<bool> moved_{false};  // reader workers may share a File (pread)
};

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// `path` is `dir` or inside it (dir given with or without a trailing '/').
bool IsUnder(const std::string& path, std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return path.compare(0, dir.size(), dir) == 0 && (path.size() == dir.size() || path[dir.size()] == '/');
}

}  // namespace

Result<std::unique_ptr<File>> MeterEnv::OpenFile(const std::string& p, OpenMode m, const OpenOptions& o) {
  CKPT_ASSIGN_OR_RETURN(std::unique_ptr<File> f, target()->OpenFile(p, m, o));
  if (!only_under_.empty() && !(IsUnder(p, only_under_) && EndsWith(p, suffix_))) return f;  // not metered
  return std::unique_ptr<File>(new MeterFile(this, std::move(f)));
}

void MeterEnv::FileDone(const std::string& path) {
  if (!EndsWith(path, suffix_)) return;
  std::lock_guard<std::mutex> lock(mu_);  // once per file, not per chunk
  if (done_.insert(path).second) progress_->AddFile();
}

}  // namespace ckpt
