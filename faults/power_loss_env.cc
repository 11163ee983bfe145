#include "faults/power_loss_env.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "faults/fault_env.h"

namespace ckpt::faults {
namespace {

constexpr uint32_t kMagic = 0x504c4a31;  // "PLJ1"

void PutU64(std::string& s, uint64_t v) { s.append(reinterpret_cast<const char*>(&v), 8); }
void PutStr(std::string& s, const std::string& v) {
  PutU64(s, v.size());
  s += v;
}

class Cursor {
 public:
  explicit Cursor(std::string_view b) : b_(b) {}
  bool U64(uint64_t* v) {
    if (b_.size() - pos_ < 8) return false;
    std::memcpy(v, b_.data() + pos_, 8);
    pos_ += 8;
    return true;
  }
  bool Str(std::string* v) {
    uint64_t n = 0;
    if (!U64(&n) || b_.size() - pos_ < n) return false;
    v->assign(b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  bool done() const { return pos_ == b_.size(); }
  size_t pos() const { return pos_; }

 private:
  std::string_view b_;
  size_t pos_ = 0;
};

// Content of `path` if it is an existing file (for undo records); "" otherwise.
std::string ContentIfFile(Env* env, const std::string& path, bool* existed) {
  *existed = false;
  auto info = env->Stat(path);
  if (!info.ok() || info->kind != FileKind::kFile) return "";  // never read through a link
  auto data = ReadFileToString(env, path);
  if (!data.ok()) return "";
  *existed = true;
  return std::move(data).value();
}

class PowerLossFile final : public FileWrapper {
 public:
  PowerLossFile(PowerLossEnv* env, std::unique_ptr<File> f) : FileWrapper(std::move(f)), env_(env) {}

  Result<size_t> PRead(uint64_t offset, std::span<std::byte> dst) override {
    env_->CheckPower();
    return target()->PRead(offset, dst);
  }
  Status PWrite(uint64_t offset, std::span<const std::byte> src) override {
    std::lock_guard<std::mutex> lock(env_->mu());
    env_->CheckPower();
    CKPT_ASSIGN_OR_RETURN(uint64_t size, target()->Size());
    JournalRecord r{JournalOp::kWrite, 0, 0, 0, path(), "", offset, size, "", ""};
    if (offset < size) {
      r.pre.resize(std::min<uint64_t>(src.size(), size - offset));
      CKPT_ASSIGN_OR_RETURN(size_t n, target()->PRead(offset, std::as_writable_bytes(std::span(r.pre))));
      r.pre.resize(n);
    }
    r.data.assign(reinterpret_cast<const char*>(src.data()), src.size());
    env_->Journal(std::move(r));
    return target()->PWrite(offset, src);
  }
  Status Truncate(uint64_t new_size) override {
    std::lock_guard<std::mutex> lock(env_->mu());
    env_->CheckPower();
    CKPT_ASSIGN_OR_RETURN(uint64_t size, target()->Size());
    JournalRecord r{JournalOp::kTruncate, 0, 0, 0, path(), "", new_size, size, "", ""};
    if (new_size < size) {
      r.pre.resize(size - new_size);
      CKPT_ASSIGN_OR_RETURN(size_t n, target()->PRead(new_size, std::as_writable_bytes(std::span(r.pre))));
      r.pre.resize(n);
    }
    env_->Journal(std::move(r));
    return target()->Truncate(new_size);
  }
  Result<uint64_t> Size() override {
    env_->CheckPower();
    return target()->Size();
  }
  Status Sync() override {
    env_->CheckPower();
    CKPT_RETURN_IF_ERROR(target()->Sync());
    std::lock_guard<std::mutex> lock(env_->mu());
    env_->Journal({JournalOp::kSync, 0, 0, 0, path(), "", 0, 0, "", ""});
    return Status::Ok();
  }
  Status Close() override {
    env_->CheckPower();
    return target()->Close();
  }

 private:
  PowerLossEnv* env_;
};

}  // namespace

std::string EncodeJournalRecord(const JournalRecord& r) {
  std::string s;
  PutU64(s, (uint64_t(kMagic) << 32) | (uint64_t(r.op) << 24) | uint64_t(uint32_t(r.rank) & 0xffffff));
  PutU64(s, uint64_t(r.seq));
  PutU64(s, uint64_t(r.ts));
  PutStr(s, r.path);
  PutStr(s, r.path2);
  PutU64(s, r.a);
  PutU64(s, r.b);
  PutStr(s, r.pre);
  PutStr(s, r.data);
  return s;
}

Result<std::vector<JournalRecord>> DecodeJournal(std::string_view bytes, const std::string& what) {
  std::vector<JournalRecord> out;
  Cursor c(bytes);
  while (!c.done()) {
    const size_t start = c.pos();
    JournalRecord r;
    uint64_t head = 0, seq = 0, ts = 0;
    bool whole = c.U64(&head) && c.U64(&seq) && c.U64(&ts) && c.Str(&r.path) && c.Str(&r.path2) && c.U64(&r.a) &&
                 c.U64(&r.b) && c.Str(&r.pre) && c.Str(&r.data);
    if (!whole) break;  // torn tail: that operation never started
    if ((head >> 32) != kMagic)
      return Status::Corruption("power-loss journal " + what + ": bad record at byte " + std::to_string(start));
    r.op = JournalOp((head >> 24) & 0xff);
    r.rank = int(head & 0xffffff);
    r.seq = int64_t(seq);
    r.ts = int64_t(ts);
    out.push_back(std::move(r));
  }
  return out;
}

Result<std::unique_ptr<PowerLossEnv>> PowerLossEnv::Create(Env* target, Options opts) {
  int fd = ::open(opts.journal_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    return Status::IOError("power-loss journal '" + opts.journal_path + "': " + std::string(strerror(errno)));
  return std::unique_ptr<PowerLossEnv>(new PowerLossEnv(target, std::move(opts), fd));
}

PowerLossEnv::~PowerLossEnv() { ::close(fd_); }

void PowerLossEnv::Journal(JournalRecord r) {
  r.rank = opts_.rank;
  r.seq = ++seq_;
  r.ts = MonotonicNs();
  const std::string s = EncodeJournalRecord(r);
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd_, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // Without its journal the simulation would be wrong: stop loudly.
      std::fprintf(stderr, "ckpt faults: power-loss journal write failed: %s\n", strerror(errno));
      _exit(70);
    }
    done += size_t(n);
  }
}

void PowerLossEnv::Cut() {
  const std::string tmp = opts_.cut_marker + ".tmp." + std::to_string(::getpid());
  const std::string line = std::to_string(MonotonicNs()) + " rank " + std::to_string(opts_.rank) + "\n";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ssize_t n = ::write(fd, line.data(), line.size());
    static_cast<void>(n);
    ::close(fd);
    // link() never replaces: the first cut wins if two ranks cut at once.
    if (::link(tmp.c_str(), opts_.cut_marker.c_str()) != 0 && errno != EEXIST)
      std::fprintf(stderr, "ckpt faults: cannot write cut marker: %s\n", strerror(errno));
    ::unlink(tmp.c_str());
  }
}

void PowerLossEnv::CheckPower() {
  if (::access(opts_.cut_marker.c_str(), F_OK) == 0) _exit(kPowerCutExitCode);
}

Result<std::unique_ptr<File>> PowerLossEnv::OpenFile(const std::string& path, OpenMode mode, const OpenOptions& o) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckPower();
  if (mode == OpenMode::kCreate) {
    bool existed = false;
    std::string old = ContentIfFile(target(), path, &existed);
    Journal({JournalOp::kCreate, 0, 0, 0, path, "", existed ? 1u : 0u, 0, "", std::move(old)});
  }
  CKPT_ASSIGN_OR_RETURN(auto f, target()->OpenFile(path, mode, o));
  return std::unique_ptr<File>(new PowerLossFile(this, std::move(f)));
}

Status PowerLossEnv::CreateDir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckPower();
  CKPT_ASSIGN_OR_RETURN(FileInfo info, target()->Stat(path));
  if (!info.exists) Journal({JournalOp::kMkdir, 0, 0, 0, path, "", 0, 0, "", ""});
  return target()->CreateDir(path);
}

Status PowerLossEnv::RemoveFile(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckPower();
  bool existed = false;
  std::string old = ContentIfFile(target(), path, &existed);
  if (existed) Journal({JournalOp::kRemove, 0, 0, 0, path, "", 0, 0, "", std::move(old)});
  return target()->RemoveFile(path);
}

Status PowerLossEnv::RemoveDir(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckPower();
  CKPT_ASSIGN_OR_RETURN(FileInfo info, target()->Stat(path));
  if (info.exists && info.is_dir) Journal({JournalOp::kRmdir, 0, 0, 0, path, "", 0, 0, "", ""});
  return target()->RemoveDir(path);
}

Status PowerLossEnv::DoRename(const std::string& from, const std::string& to, bool no_replace) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckPower();
  CKPT_ASSIGN_OR_RETURN(FileInfo src, target()->Stat(from));
  if (src.exists) {
    bool replaced = false;
    std::string old = no_replace ? "" : ContentIfFile(target(), to, &replaced);
    Journal({JournalOp::kRename, 0, 0, 0, from, to, replaced ? 1u : 0u, 0, "", std::move(old)});
  }
  return no_replace ? target()->RenameNoReplace(from, to) : target()->Rename(from, to);
}

Status PowerLossEnv::Rename(const std::string& f, const std::string& t) { return DoRename(f, t, false); }
Status PowerLossEnv::RenameNoReplace(const std::string& f, const std::string& t) { return DoRename(f, t, true); }

Status PowerLossEnv::SyncDir(const std::string& path) {
  CheckPower();
  CKPT_RETURN_IF_ERROR(target()->SyncDir(path));
  std::lock_guard<std::mutex> lock(mu_);
  Journal({JournalOp::kSyncDir, 0, 0, 0, path, "", 0, 0, "", ""});
  return Status::Ok();
}

Result<std::vector<std::string>> PowerLossEnv::ListDir(const std::string& path) {
  CheckPower();
  return target()->ListDir(path);
}

Result<FileInfo> PowerLossEnv::Stat(const std::string& path) {
  CheckPower();
  return target()->Stat(path);
}

Result<int64_t> ReadCutMarker(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  if (!f) {
    if (errno == ENOENT) return int64_t(INT64_MAX);
    return Status::IOError("cut marker '" + path + "': " + std::string(strerror(errno)));
  }
  long long t = 0;
  int n = std::fscanf(f, "%lld", &t);
  std::fclose(f);
  if (n != 1) return Status::Corruption("cut marker '" + path + "' holds no time");
  return int64_t(t);
}

}  // namespace ckpt::faults
