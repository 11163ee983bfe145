#include "faults/fault_env.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include <nlohmann/json.hpp>

#include "ckpt/format/manifest.h"
#include "faults/damage.h"

namespace ckpt::faults {
namespace {

// Appends one line with a single write(2) so concurrent ranks never interleave.
void AppendLine(const std::string& path, const std::string& line) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  std::string s = line + "\n";
  ssize_t n = ::write(fd, s.data(), s.size());
  static_cast<void>(n);  // best effort: the log is evidence, not state
  ::close(fd);
}

class FaultFile final : public FileWrapper {
 public:
  FaultFile(FaultEnv* env, std::unique_ptr<File> f) : FileWrapper(std::move(f)), env_(env) {}

  Result<size_t> PRead(uint64_t offset, std::span<std::byte> dst) override {
    CKPT_RETURN_IF_ERROR(env_->Intercept("env.pread", path(), offset, dst.size()));
    return target()->PRead(offset, dst);
  }
  Status PWrite(uint64_t offset, std::span<const std::byte> src) override {
    int64_t keep = -1;
    Status st = env_->Intercept("env.pwrite", path(), offset, src.size(), &keep);
    // A short write is what a full disk does: part of the data lands, then the error.
    if (keep > 0) target()->PWrite(offset, src.first(size_t(keep))).IgnoreError();
    if (!st.ok()) return st;
    return target()->PWrite(offset, src);
  }
  Status Truncate(uint64_t size) override {
    CKPT_RETURN_IF_ERROR(env_->Intercept("env.truncate", path(), size, 0));
    return target()->Truncate(size);
  }
  Result<uint64_t> Size() override {
    CKPT_RETURN_IF_ERROR(env_->Intercept("env.size", path(), 0, 0));
    return target()->Size();
  }
  Status Sync() override {
    CKPT_RETURN_IF_ERROR(env_->Intercept("env.fsync", path(), 0, 0));
    return env_->sync_disabled() ? Status::Ok() : target()->Sync();
  }
  Status Close() override {
    CKPT_RETURN_IF_ERROR(env_->Intercept("env.close", path(), 0, 0));
    return target()->Close();
  }

 private:
  FaultEnv* env_;
};

[[noreturn]] void SleepForever() {
  for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
}

}  // namespace

int64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string TraceToJsonLines(const std::vector<TraceEntry>& trace) {
  std::string out;
  for (const auto& e : trace)
    out += nlohmann::json{{"seq", e.seq}, {"point", e.point}, {"nth", e.nth}, {"path", e.path},
                          {"offset", e.offset}, {"bytes", e.bytes}}.dump() + "\n";
  return out;
}

Result<std::vector<TraceEntry>> TraceFromJsonLines(std::string_view text) {
  std::vector<TraceEntry> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = text.substr(pos, nl - pos);
    pos = nl + 1;
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("point") || !j.contains("nth"))
      return Status::Corruption("bad trace line: " + std::string(line.substr(0, 80)));
    out.push_back({j.value("seq", int64_t(0)), j["point"].get<std::string>(), j["nth"].get<int64_t>(),
                   j.value("path", std::string()), j.value("offset", uint64_t(0)), j.value("bytes", uint64_t(0))});
  }
  return out;
}

FaultEnv::FaultEnv(Env* target, Options opts)
    : EnvWrapper(target), opts_(std::move(opts)), rule_count_(opts_.plan.rules.size(), 0) {}

Status FaultEnv::Intercept(std::string_view point, const std::string& path, uint64_t offset, uint64_t bytes,
                           int64_t* keep) {
  const FaultRule* hit = nullptr;
  int64_t nth = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int64_t n = ++point_count_[std::string(point)];
    ++seq_;
    if (opts_.record_trace) trace_.push_back({seq_, std::string(point), n, path, offset, bytes});
    // Every matching rule counts the call; the first one due fires.
    for (size_t i = 0; i < opts_.plan.rules.size(); ++i) {
      const FaultRule& r = opts_.plan.rules[i];
      if (r.point != point || (r.rank >= 0 && r.rank != opts_.rank)) continue;
      if (!r.path.empty() && path.find(r.path) == std::string::npos) continue;
      const int64_t c = ++rule_count_[i];
      if (!hit && (c == r.nth || (r.persistent && c > r.nth))) {
        hit = &r;
        nth = c;
      }
    }
    if (hit) ++fired_;
  }
  return hit ? Fire(*hit, nth, path, bytes, keep) : Status::Ok();
}

void FaultEnv::LogEvent(const FaultRule& r, int64_t nth, const std::string& path) {
  std::fprintf(stderr, "ckpt faults: rank %d: %s at %s #%lld%s%s\n", opts_.rank, ActionName(r.action).data(),
               r.point.c_str(), static_cast<long long>(nth), path.empty() ? "" : " ", path.c_str());
  if (opts_.event_log.empty()) return;
  AppendLine(opts_.event_log, nlohmann::json{{"rank", opts_.rank}, {"point", r.point}, {"nth", nth},
                                             {"action", ActionName(r.action)}, {"path", path},
                                             {"t_ns", MonotonicNs()}}.dump());
}

Status FaultEnv::Fire(const FaultRule& r, int64_t nth, const std::string& path, uint64_t bytes, int64_t* keep) {
  LogEvent(r, nth, path);
  const std::string what = "injected " + std::string(ActionName(r.action)) + " at " + r.point + " #" +
                           std::to_string(nth) + " on rank " + std::to_string(opts_.rank) +
                           (path.empty() ? "" : " ('" + path + "')");
  switch (r.action) {
    case Action::kCrash:
    case Action::kPowerCut:
      if (opts_.before_crash) opts_.before_crash();
      _exit(r.action == Action::kCrash ? kCrashExitCode : kPowerCutExitCode);
    case Action::kSigkill:
      if (opts_.before_crash) opts_.before_crash();
      ::kill(::getpid(), SIGKILL);
      SleepForever();
    case Action::kHang:
      SleepForever();
    case Action::kDelay:
      std::this_thread::sleep_for(std::chrono::milliseconds(r.ms));
      return Status::Ok();
    case Action::kEio:
      return Status::IOError(what);
    case Action::kEnospc:
      return Status::NoSpace(what);
    case Action::kShortWrite: {
      int64_t k = r.bytes >= 0 ? std::min<int64_t>(r.bytes, int64_t(bytes)) : int64_t(bytes / 2);
      if (keep) *keep = k;
      return Status::NoSpace(what + ": wrote " + std::to_string(k) + " of " + std::to_string(bytes) + " bytes");
    }
    case Action::kBitFlip:
    case Action::kTruncate:
    case Action::kDelete: {
      DamageRequest req{r.action, r.file.empty() ? ShardFileName(opts_.rank) : r.file, r.chunk, uint64_t(nth) * 8 + 3};
      auto d = ApplyDamage(target(), opts_.root, opts_.iteration, req);
      if (!d.ok()) return d.status().WithContext(what + ": damage failed");
      std::fprintf(stderr, "ckpt faults: rank %d: damaged %s\n", opts_.rank, d->ToString().c_str());
      return Status::Ok();
    }
  }
  return Status::Internal(what + ": unknown action");
}

StepHook FaultEnv::Hook(StepHook chain) {
  return [this, chain](std::string_view step, int rank) -> Status {
    if (chain) CKPT_RETURN_IF_ERROR(chain(step, rank));
    return Intercept("step." + std::string(step), "", 0, 0);
  };
}

std::vector<TraceEntry> FaultEnv::Trace() const {
  std::lock_guard<std::mutex> lock(mu_);
  return trace_;
}

int64_t FaultEnv::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

Result<std::unique_ptr<File>> FaultEnv::OpenFile(const std::string& path, OpenMode mode, const OpenOptions& o) {
  CKPT_RETURN_IF_ERROR(Intercept("env.open", path, uint64_t(mode), 0));
  CKPT_ASSIGN_OR_RETURN(auto f, target()->OpenFile(path, mode, o));
  return std::unique_ptr<File>(new FaultFile(this, std::move(f)));
}

Status FaultEnv::CreateDir(const std::string& p) {
  CKPT_RETURN_IF_ERROR(Intercept("env.mkdir", p, 0, 0));
  return target()->CreateDir(p);
}
Status FaultEnv::RemoveFile(const std::string& p) {
  CKPT_RETURN_IF_ERROR(Intercept("env.remove", p, 0, 0));
  return target()->RemoveFile(p);
}
Status FaultEnv::RemoveDir(const std::string& p) {
  CKPT_RETURN_IF_ERROR(Intercept("env.rmdir", p, 0, 0));
  return target()->RemoveDir(p);
}
Status FaultEnv::Rename(const std::string& f, const std::string& t) {
  CKPT_RETURN_IF_ERROR(Intercept("env.rename", f + " -> " + t, 0, 0));
  return target()->Rename(f, t);
}
Status FaultEnv::RenameNoReplace(const std::string& f, const std::string& t) {
  CKPT_RETURN_IF_ERROR(Intercept("env.rename", f + " -> " + t, 1, 0));
  return target()->RenameNoReplace(f, t);
}
Status FaultEnv::SyncDir(const std::string& p) {
  CKPT_RETURN_IF_ERROR(Intercept("env.syncdir", p, 0, 0));
  return opts_.plan.disable_sync ? Status::Ok() : target()->SyncDir(p);
}
Result<std::vector<std::string>> FaultEnv::ListDir(const std::string& p) {
  CKPT_RETURN_IF_ERROR(Intercept("env.listdir", p, 0, 0));
  return target()->ListDir(p);
}
Result<FileInfo> FaultEnv::Stat(const std::string& p) {
  CKPT_RETURN_IF_ERROR(Intercept("env.stat", p, 0, 0));
  return target()->Stat(p);
}

}  // namespace ckpt::faults
