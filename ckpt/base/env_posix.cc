// POSIX Env: the only place errno becomes a Status.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>

#include "ckpt/base/dir_lock.h"
#include "ckpt/base/env.h"
#include "ckpt/base/page_cache.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif

namespace ckpt {
namespace {

Status ErrnoStatus(const std::string& op, const std::string& path, int err) {
  std::string m = op + " '" + path + "': " + strerror(err);
  switch (err) {
    case ENOENT: return Status::NotFound(m);
    case EEXIST:
    case ENOTEMPTY: return Status::AlreadyExists(m);
    case ENOSPC:
    case EDQUOT: return Status::NoSpace(m);
    default: return Status::IOError(m);
  }
}

class PosixFile final : public File {
 public:
  PosixFile(std::string path, int fd, PosixWriteback wb) : path_(std::move(path)), fd_(fd), wb_(wb) {}
  ~PosixFile() override { Close().IgnoreError(); }

  const std::string& path() const override { return path_; }

  Result<size_t> PRead(uint64_t offset, std::span<std::byte> dst) override {
    if (dfd_ >= 0 && reads_direct_) return PReadDirect(offset, dst);
    return ReadAll(fd_, offset, dst, "pread");
  }

  void WillNeed(uint64_t offset, uint64_t bytes) override {
    if (fd_ >= 0) (void)::posix_fadvise(fd_, off_t(offset), off_t(bytes), POSIX_FADV_WILLNEED);
  }

  Status PWrite(uint64_t offset, std::span<const std::byte> src) override {
    if (dfd_ >= 0) return PWriteDirect(offset, src);
    CKPT_RETURN_IF_ERROR(WriteAll(fd_, offset, src, "pwrite"));
    if (direct_.requested) direct_.buffered_bytes += src.size();
    return EarlyWriteback(offset, src.size());
  }

  DirectIoStats direct_io() const override { return direct_; }

  double PageCacheShare() override {
    struct stat st;
    if (fd_ < 0 || ::fstat(fd_, &st) != 0) return -1;
    return SampledPageCacheShare(fd_, uint64_t(st.st_size));
  }

  // OpenOptions::direct: a second, O_DIRECT descriptor of the same inode (for
  // reading when `read`, else for writing). Any failure (EINVAL: the
  // filesystem has no O_DIRECT) leaves the file buffered and records why;
  // `refuse` simulates that (tests).
  void OpenDirect(bool refuse, bool read, bool follow_links) {
    direct_.requested = true;
    reads_direct_ = read;
    const std::string then = read ? "; reading through the page cache" : "; writing through the page cache";
    const int flags = (read ? O_RDONLY : O_WRONLY) | O_DIRECT | O_CLOEXEC | (follow_links ? 0 : O_NOFOLLOW);
    const int dfd = refuse ? -1 : ::open(path_.c_str(), flags);
    const int err = refuse ? EINVAL : errno;
    if (dfd < 0) {
      direct_.fallback = std::string("open(O_DIRECT): ") + strerror(err) + then;
      return;
    }
    struct stat a, b;
    if (::fstat(fd_, &a) != 0 || ::fstat(dfd, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
      ::close(dfd);
      direct_.fallback = "open(O_DIRECT): the path names another file now" + then;
      return;
    }
    dfd_ = dfd;
    direct_.active = true;
  }

  Status Truncate(uint64_t size) override {
    if (::ftruncate(fd_, off_t(size)) != 0) return ErrnoStatus("ftruncate", path_, errno);
    return Status::Ok();
  }

  Result<uint64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return ErrnoStatus("fstat", path_, errno);
    return uint64_t(st.st_size);
  }

  Status Sync() override {
    if (!wb_error_.ok()) return wb_error_;  // an error seen early stays the answer
    if (::fdatasync(fd_) != 0) return ErrnoStatus("fdatasync", path_, errno);
    return Status::Ok();
  }

  Status Close() override {
    if (dfd_ >= 0) {
      const int dfd = dfd_;
      dfd_ = -1;
      if (::close(dfd) != 0) {
        const int err = errno;
        Close().IgnoreError();
        return ErrnoStatus("close", path_, err);
      }
    }
    if (fd_ < 0) return Status::Ok();
    int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) return ErrnoStatus("close", path_, errno);
    return Status::Ok();
  }

 private:
  Status WriteAll(int fd, uint64_t offset, std::span<const std::byte> src, const char* op) {
    size_t done = 0;
    while (done < src.size()) {
      ssize_t n = ::pwrite(fd, src.data() + done, src.size() - done, off_t(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(op, path_, errno);
      }
      done += size_t(n);
    }
    return Status::Ok();
  }

  // The kDirectIoAlign-aligned middle [lo, hi) of the n bytes at `offset`
  // whose buffer starts at `buf`; empty (lo == hi) when there is none or the
  // buffer is not aligned there, so the whole IO goes through the page cache.
  static std::pair<uint64_t, uint64_t> AlignedMiddle(uint64_t offset, size_t n, const void* buf) {
    constexpr uint64_t a = kDirectIoAlign;
    const uint64_t end = offset + n;
    const uint64_t lo = std::min(end, (offset + a - 1) / a * a), hi = std::max(lo, end / a * a);
    if (hi == lo || (reinterpret_cast<uintptr_t>(buf) + (lo - offset)) % a != 0) return {lo, lo};
    return {lo, hi};
  }

  // The filesystem took O_DIRECT at open but refused the first IO (`err`):
  // this file goes through the page cache from now on, and says why.
  void StopDirect(const char* op, int err, const char* then) {
    direct_.fallback = op + std::string(strerror(err)) + then;
    direct_.active = false;
    ::close(dfd_);
    dfd_ = -1;
  }

  Result<size_t> ReadAll(int fd, uint64_t offset, std::span<std::byte> dst, const char* op) {
    size_t done = 0;
    while (done < dst.size()) {
      ssize_t n = ::pread(fd, dst.data() + done, dst.size() - done, off_t(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        return ErrnoStatus(op, path_, errno);
      }
      if (n == 0) break;
      done += size_t(n);
    }
    return done;
  }

  // Reads of a kRead direct file: the aligned middle (aligned buffer) through
  // O_DIRECT, head and tail (or all of a misaligned read) through the page
  // cache; short only at EOF.
  Result<size_t> PReadDirect(uint64_t offset, std::span<std::byte> dst) {
    const auto [lo, hi] = AlignedMiddle(offset, dst.size(), dst.data());
    if (hi == lo) return ReadAll(fd_, offset, dst, "pread");
    CKPT_ASSIGN_OR_RETURN(size_t head, ReadAll(fd_, offset, dst.first(lo - offset), "pread"));
    if (head < lo - offset) return head;
    CKPT_ASSIGN_OR_RETURN(size_t mid, DirectRead(lo, dst.subspan(lo - offset, hi - lo)));
    if (mid < hi - lo) return (lo - offset) + mid;
    CKPT_ASSIGN_OR_RETURN(size_t tail, ReadAll(fd_, hi, dst.subspan(hi - offset), "pread"));
    return (hi - offset) + tail;
  }

  // An EINVAL on the first direct read: the filesystem took the open but not
  // the IO, so this file reads through the page cache from now on. A direct
  // read that ends off the alignment hit EOF (or was cut short): the rest, if
  // any, is read buffered, which also finds the EOF.
  Result<size_t> DirectRead(uint64_t offset, std::span<std::byte> dst) {
    size_t done = 0;
    while (done < dst.size()) {
      ssize_t n = ::pread(dfd_, dst.data() + done, dst.size() - done, off_t(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EINVAL || direct_.direct_reads > 0) return ErrnoStatus("pread(O_DIRECT)", path_, errno);
        StopDirect("pread(O_DIRECT): ", errno, "; reading through the page cache");
        CKPT_ASSIGN_OR_RETURN(size_t rest, ReadAll(fd_, offset + done, dst.subspan(done), "pread"));
        return done + rest;
      }
      ++direct_.direct_reads;
      direct_.direct_read_bytes += uint64_t(n);
      if (n == 0) break;
      done += size_t(n);
      if (uint64_t(n) % kDirectIoAlign != 0) {
        CKPT_ASSIGN_OR_RETURN(size_t rest, ReadAll(fd_, offset + done, dst.subspan(done), "pread"));
        return done + rest;
      }
    }
    return done;
  }

  Status Buffered(uint64_t offset, std::span<const std::byte> src) {
    direct_.buffered_bytes += src.size();
    return WriteAll(fd_, offset, src, "pwrite");
  }

  // The kDirectIoAlign-aligned middle of the write goes to the O_DIRECT
  // descriptor if its buffer is aligned there too; head, tail and writes with
  // a misaligned buffer go through the page cache. No early writeback here:
  // the direct bytes are written back already.
  Status PWriteDirect(uint64_t offset, std::span<const std::byte> src) {
    const auto [lo, hi] = AlignedMiddle(offset, src.size(), src.data());
    if (hi == lo) return Buffered(offset, src);
    CKPT_RETURN_IF_ERROR(Buffered(offset, src.first(lo - offset)));
    CKPT_RETURN_IF_ERROR(Direct(lo, src.subspan(lo - offset, hi - lo)));
    return Buffered(hi, src.subspan(hi - offset));
  }

  // An EINVAL on the first direct write means the filesystem accepted the
  // open but not the IO: fall back to buffered for good (nothing was written).
  Status Direct(uint64_t offset, std::span<const std::byte> src) {
    size_t done = 0;
    while (done < src.size()) {
      ssize_t n = ::pwrite(dfd_, src.data() + done, src.size() - done, off_t(offset + done));
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno != EINVAL || direct_.direct_writes > 0) return ErrnoStatus("pwrite(O_DIRECT)", path_, errno);
        StopDirect("pwrite(O_DIRECT): ", errno, "; writing through the page cache");
        return Buffered(offset + done, src.subspan(done));
      }
      ++direct_.direct_writes;
      direct_.direct_bytes += uint64_t(n);
      done += size_t(n);
      if (uint64_t(n) % kDirectIoAlign != 0) return Buffered(offset + done, src.subspan(done));  // short
    }
    return Status::Ok();
  }

  // Once `wb_.bytes` have been written since the last kick, starts writeback
  // of the range written since (SYNC_FILE_RANGE_WRITE, asynchronous) and, with
  // `wb_.bound_dirty`, waits for the range kicked before it: dirty pages of
  // this file stay under ~2 x wb_.bytes and the final fdatasync only has the
  // tail left. Nothing here replaces Sync(). A wait can consume a writeback
  // error that fdatasync would then no longer report (errseq), so any error
  // is kept and returned by this write and by every later Sync().
  Status EarlyWriteback(uint64_t offset, uint64_t n) {
    if (wb_.bytes == 0 || n == 0) return wb_error_;
    if (!wb_error_.ok()) return wb_error_;
    lo_ = pending_ == 0 ? offset : std::min(lo_, offset);
    hi_ = pending_ == 0 ? offset + n : std::max(hi_, offset + n);
    pending_ += n;
    if (pending_ < wb_.bytes) return Status::Ok();
    if (::sync_file_range(fd_, off_t(lo_), off_t(hi_ - lo_), SYNC_FILE_RANGE_WRITE) != 0) {
      wb_error_ = ErrnoStatus("sync_file_range(WRITE)", path_, errno);
    } else if (wb_.bound_dirty && prev_hi_ > prev_lo_ &&
               ::sync_file_range(fd_, off_t(prev_lo_), off_t(prev_hi_ - prev_lo_),
                                 SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                     SYNC_FILE_RANGE_WAIT_AFTER) != 0) {
      wb_error_ = ErrnoStatus("sync_file_range(WAIT)", path_, errno);
    }
    prev_lo_ = lo_;
    prev_hi_ = hi_;
    pending_ = 0;
    return wb_error_;
  }

  std::string path_;
  int fd_;
  int dfd_ = -1;  // O_DIRECT descriptor (OpenOptions::direct), else -1
  bool reads_direct_ = false;  // dfd_ is for reading (a kRead file), not writing
  DirectIoStats direct_;
  PosixWriteback wb_;
  Status wb_error_ = Status::Ok();
  uint64_t pending_ = 0, lo_ = 0, hi_ = 0, prev_lo_ = 0, prev_hi_ = 0;
};

bool IsLink(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode);
}

// OpenFile met a link (O_NOFOLLOW). Reads: damage like any other non-regular
// file under a root; writes: a refusal, nothing was touched.
Status LinkRefused(const std::string& path, OpenMode mode) {
  if (mode == OpenMode::kRead)
    return Status::Corruption("'" + path + "' is a symbolic link, not a regular file: refused (ckpt does not "
                              "read through links)");
  return Status::FailedPrecondition("'" + path + "' is a symbolic link: refused (ckpt does not write through "
                                    "links)");
}

class PosixEnv final : public Env {
 public:
  PosixEnv(PosixWriteback wb, bool refuse_direct) : wb_(wb), refuse_direct_(refuse_direct) {}

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode, const OpenOptions& opts = {}) override {
    int flags = O_CLOEXEC;
    switch (mode) {
      case OpenMode::kRead: flags |= O_RDONLY; break;
      case OpenMode::kCreate: flags |= O_RDWR | O_CREAT | O_TRUNC; break;
      case OpenMode::kReadWrite: flags |= O_RDWR; break;
    }
    // Opened non-blocking so a FIFO named by a hostile manifest cannot block
    // the open; anything but a regular file is refused before any IO.
    // O_NOFOLLOW: a link in the last component is never read or written
    // through (kCreate would truncate whatever it names); ELOOP says so.
    if (!opts.follow_links) flags |= O_NOFOLLOW;
    int fd = ::open(path.c_str(), flags | (mode == OpenMode::kCreate ? 0 : O_NONBLOCK), 0644);
    if (fd < 0) {
      const int err = errno;
      if (err == ELOOP && !opts.follow_links && IsLink(path)) return LinkRefused(path, mode);
      return ErrnoStatus("open", path, err);
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus("fstat", path, err);
    }
    if (!S_ISREG(st.st_mode)) {
      ::close(fd);
      return Status::Corruption("'" + path + "' is not a regular file (" + (S_ISDIR(st.st_mode) ? "a directory" :
                                S_ISFIFO(st.st_mode) ? "a FIFO" : "a device or socket") + "): refused");
    }
    if (mode != OpenMode::kCreate && ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
      const int err = errno;
      ::close(fd);
      return ErrnoStatus("fcntl", path, err);
    }
    auto file = std::make_unique<PosixFile>(path, fd, mode == OpenMode::kRead ? PosixWriteback{0, false} : wb_);
    if (opts.direct) file->OpenDirect(refuse_direct_, mode == OpenMode::kRead, opts.follow_links);
    return std::unique_ptr<File>(std::move(file));
  }

  Status CreateDir(const std::string& path) override {
    if (::mkdir(path.c_str(), 0755) != 0) return ErrnoStatus("mkdir", path, errno);
    return Status::Ok();
  }

  Status RemoveFile(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return ErrnoStatus("unlink", path, errno);
    return Status::Ok();
  }

  Status RemoveDir(const std::string& path) override {
    if (::rmdir(path.c_str()) != 0) return ErrnoStatus("rmdir", path, errno);
    return Status::Ok();
  }

  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return ErrnoStatus("rename", from + "' -> '" + to, errno);
    return Status::Ok();
  }

  Status RenameNoReplace(const std::string& from, const std::string& to) override {
    long rc = ::syscall(SYS_renameat2, AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE);
    if (rc != 0) {
      int err = errno;
      if (err != ENOSYS && err != EINVAL) return ErrnoStatus("renameat2(NOREPLACE)", from + "' -> '" + to, err);
      // Filesystem without RENAME_NOREPLACE: link+unlink is not usable for
      // directories, so fall back to check-then-rename (single writer: rank 0).
      struct stat st;
      if (::lstat(to.c_str(), &st) == 0) return ErrnoStatus("rename", from + "' -> '" + to, EEXIST);
      return Rename(from, to);
    }
    return Status::Ok();
  }

  Status SyncDir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus("open dir", path, errno);
    int rc = ::fsync(fd);
    int err = errno;
    ::close(fd);
    if (rc != 0) return ErrnoStatus("fsync dir", path, err);
    return Status::Ok();
  }

  Result<std::vector<std::string>> ListDir(const std::string& path) override {
    DIR* d = ::opendir(path.c_str());
    if (!d) return ErrnoStatus("opendir", path, errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(std::move(n));
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }

  // lstat: the entry itself; for a link, stat says what it resolves to.
  Result<FileInfo> Stat(const std::string& path) override {
    struct stat st;
    FileInfo info;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return info;
      return ErrnoStatus("lstat", path, errno);
    }
    info.exists = true;
    info.kind = KindOf(st.st_mode);
    info.is_dir = info.kind == FileKind::kDir;
    info.size = uint64_t(st.st_size);
    struct stat target;
    if (info.kind == FileKind::kSymlink && ::stat(path.c_str(), &target) == 0) info.link_target = KindOf(target.st_mode);
    return info;
  }

  static FileKind KindOf(mode_t m) {
    return S_ISREG(m) ? FileKind::kFile : S_ISDIR(m) ? FileKind::kDir : S_ISLNK(m) ? FileKind::kSymlink : FileKind::kOther;
  }

 private:
  const PosixWriteback wb_;
  const bool refuse_direct_;
};

}  // namespace

Result<std::unique_ptr<DirLock>> DirLock::TryLock(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open dir", path, errno);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) return Status::AlreadyExists("'" + path + "' is locked by another process");
    return ErrnoStatus("flock", path, err);
  }
  return std::unique_ptr<DirLock>(new DirLock(path, fd));
}

DirLock::~DirLock() { ::close(fd_); }  // closing the last descriptor drops the lock

std::string ProcessOwnerTag() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) host[0] = 0;
  std::string tag;
  for (const char* c = host; *c && tag.size() < 40; ++c)
    tag += (std::isalnum(static_cast<unsigned char>(*c)) || *c == '.') ? *c : '_';
  if (tag.empty()) tag = "host";
  return tag + "-" + std::to_string(::getpid());
}

PosixWriteback PosixWritebackFromEnvironment() {
  PosixWriteback wb;
  wb.bytes = 0;  // off unless asked for
  if (const char* v = std::getenv("CKPT_WRITEBACK_MIB"); v && *v) {
    char* end = nullptr;
    const unsigned long long n = std::strtoull(v, &end, 10);  // MiB, or KiB with a 'k' suffix (tests)
    const bool kib = end && (*end == 'k' || *end == 'K') && end[1] == 0;
    if (end && (*end == 0 || kib) && n <= (1ull << 20)) wb.bytes = uint64_t(n) << (kib ? 10 : 20);
  }
  if (const char* v = std::getenv("CKPT_WRITEBACK_BOUND"); v && *v) wb.bound_dirty = std::string(v) != "0";
  return wb;
}

namespace {
// CKPT_DIRECT_IO: -1 unset (or empty), 0 "0", 1 anything else.
int DirectIoVariable() {
  static const int v = [] {
    const char* e = std::getenv("CKPT_DIRECT_IO");
    if (!e || !*e) return -1;
    return std::string(e) == "0" ? 0 : 1;
  }();
  return v;
}
}  // namespace

bool DirectIoFromEnvironment() { return DirectIoVariable() != 0; }

DirectRead DirectReadFromEnvironment() {
  const int v = DirectIoVariable();
  return v < 0 ? DirectRead::kAuto : v == 0 ? DirectRead::kOff : DirectRead::kOn;
}

const char* DirectReadName(DirectRead mode) {
  switch (mode) {
    case DirectRead::kOff: return "off";
    case DirectRead::kOn: return "on";
    case DirectRead::kAuto: return "auto";
  }
  return "?";
}

std::unique_ptr<Env> NewPosixEnv(PosixWriteback wb, bool refuse_direct) {
  return std::make_unique<PosixEnv>(wb, refuse_direct);
}

Env* DefaultEnv() {
  static Env* env = new PosixEnv(PosixWritebackFromEnvironment(), false);
  return env;
}

}  // namespace ckpt
