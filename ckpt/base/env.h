// Env: the one door for checkpoint file IO (leveldb-style).
//
// Every byte ckpt writes or reads - HDF5 shard files included, through the
// Env-backed HDF5 virtual file driver (hdf5_vfd.h) - goes through an Env, so
// faults/ can inject errors and simulate power loss under every operation.
//
// Contract:
//  - errno is converted to Status once, in the POSIX implementation, with the
//    operation and path in the message (ENOSPC -> kNoSpace, ENOENT -> kNotFound,
//    EEXIST -> kAlreadyExists, others -> kIOError).
//  - Nothing is durable until File::Sync (data) and Env::SyncDir (names in a
//    directory) succeed. A failed Sync is final: callers must not retry it.
//  - RenameNoReplace never replaces an existing target (kAlreadyExists).
//  - Links are never followed in the last component of a path (DESIGN "Never
//    through a link"): Stat reports a symbolic link as one (lstat), OpenFile
//    refuses a link (O_NOFOLLOW, kFailedPrecondition naming it) unless
//    OpenOptions::follow_links, RemoveFile/Rename act on the link itself, and
//    RemoveDir refuses one. Components before the last are resolved as usual
//    (a checkpoint root may itself be a link), so a tree walk must Stat each
//    entry before descending into it (RemoveTree does).
//  - Env implementations are thread-safe; a File is used by one thread at a time.
//  - Decorators (EnvWrapper subclasses, File wrappers) forward OpenOptions,
//    File::direct_io() and File::PageCacheShare() unchanged, so a direct file
//    still passes every write through them.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ckpt/base/status.h"

namespace ckpt {

enum class OpenMode {
  kRead,       // existing file, read-only
  kCreate,     // create or truncate, read-write
  kReadWrite,  // existing file, read-write
};

// Per-open options (OpenFile's third argument).
//  direct: a data file whose aligned bytes should bypass the page cache
//    (POSIX: a second descriptor with O_DIRECT).
//    Writable files (kCreate, kReadWrite): any PWrite stays valid: the part of
//    a write that starts and ends on kDirectIoAlign boundaries and whose
//    buffer is kDirectIoAlign-aligned at that part's start goes direct; the
//    unaligned head/tail and whole writes with a misaligned buffer go through
//    the page cache (both paths stay coherent: the kernel flushes/invalidates
//    cached pages a direct write covers). Their reads use the page cache.
//    Durability is unchanged: nothing is durable before Sync (fdatasync
//    covers both paths).
//    kRead files: PRead splits the same way (aligned middle into an aligned
//    buffer direct, head/tail buffered); a direct read sees every byte a
//    buffered one would (the kernel writes dirty cached pages back first) and
//    returns short only at EOF, like a buffered one.
//    Where the filesystem refuses O_DIRECT (EINVAL at open or at the first
//    direct write or read) the file falls back to buffered IO and records why
//    (File::direct_io()); that is not an error.
//  follow_links: open through a symbolic link in the last component. Only for
//    inputs a user names outside any checkpoint root (a Hugging Face cache
//    links its files into snapshots/); never for a path under a root.
struct OpenOptions {
  bool direct = false;
  bool follow_links = false;
};

// The offset/length/buffer alignment at which a direct file writes without
// the page cache (a page; also the HDF5 chunk alignment, shard_file.h).
inline constexpr uint64_t kDirectIoAlign = 4096;

// What a file opened with OpenOptions::direct did (all zero otherwise).
struct DirectIoStats {
  bool requested = false;       // opened with OpenOptions::direct
  bool active = false;          // O_DIRECT in effect now
  std::string fallback;         // why not, when requested and inactive
  uint64_t direct_bytes = 0;    // written with O_DIRECT
  uint64_t buffered_bytes = 0;  // written through the page cache (unaligned parts)
  uint64_t direct_writes = 0;   // pwrite calls on the O_DIRECT descriptor
  uint64_t direct_read_bytes = 0;  // read with O_DIRECT (kRead files)
  uint64_t direct_reads = 0;       // pread calls on the O_DIRECT descriptor
};

class File {
 public:
  virtual ~File() = default;
  virtual const std::string& path() const = 0;
  // Reads up to dst.size() bytes at offset; returns the count (short only at EOF).
  virtual Result<size_t> PRead(uint64_t offset, std::span<std::byte> dst) = 0;
  // Writes all of src at offset (retrying short writes).
  virtual Status PWrite(uint64_t offset, std::span<const std::byte> src) = 0;
  virtual Status Truncate(uint64_t size) = 0;
  virtual Result<uint64_t> Size() = 0;
  virtual Status Sync() = 0;
  // Releases the descriptor. Idempotent. Does not sync.
  virtual Status Close() = 0;
  // Hint: [offset, offset+bytes) will be read soon - start reading it in the
  // background (POSIX: posix_fadvise WILLNEED). Never fails, never blocks on
  // the data; the default ignores it (decorators need not forward it).
  virtual void WillNeed(uint64_t offset, uint64_t bytes) {
    (void)offset;
    (void)bytes;
  }
  // OpenOptions::direct bookkeeping (tests, benchmarks, save reports).
  virtual DirectIoStats direct_io() const { return {}; }
  // Estimated share (0..1) of the file's bytes now in the page cache, from a
  // sample of its pages (POSIX: mincore over a read-only mapping, ~0.1 ms);
  // -1 when unknown (the default; decorators forward it). Reads no data and
  // never fails: a hint for choosing direct or buffered reads (DirectRead::kAuto).
  virtual double PageCacheShare() { return -1; }
};

// What a directory entry is (lstat: a link is reported as a link).
enum class FileKind { kNone, kFile, kDir, kSymlink, kOther };

// "nothing", "a regular file", "a directory", "a symbolic link", "a FIFO, device or socket".
const char* FileKindName(FileKind kind);

// Stat's answer about the entry itself, never what a link names (lstat).
struct FileInfo {
  bool exists = false;  // an entry of any kind, a dangling link included
  bool is_dir = false;  // a real directory (kind == kDir), never a link to one
  uint64_t size = 0;    // st_size of the entry (a link: the length of its text)
  FileKind kind = FileKind::kNone;
  // kSymlink only: what the link resolves to (kNone: dangling or unreadable).
  // Readers may use it (a link to an archived iteration loads); nothing is
  // ever written, renamed into or deleted through a link.
  FileKind link_target = FileKind::kNone;
  bool IsDirOrLinkToDir() const {
    return is_dir || (kind == FileKind::kSymlink && link_target == FileKind::kDir);
  }
};

class Env {
 public:
  virtual ~Env() = default;
  virtual Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode,
                                                 const OpenOptions& opts = {}) = 0;
  virtual Status CreateDir(const std::string& path) = 0;  // kAlreadyExists if present
  virtual Status RemoveFile(const std::string& path) = 0;  // a link: the link itself
  virtual Status RemoveDir(const std::string& path) = 0;  // must be empty; a link is refused
  virtual Status Rename(const std::string& from, const std::string& to) = 0;
  virtual Status RenameNoReplace(const std::string& from, const std::string& to) = 0;
  virtual Status SyncDir(const std::string& path) = 0;
  virtual Result<std::vector<std::string>> ListDir(const std::string& path) = 0;  // sorted names
  virtual Result<FileInfo> Stat(const std::string& path) = 0;  // lstat (see FileInfo)
};

// Early writeback of the POSIX Env's writable files: after every `bytes`
// written to a file it starts writeback of them (sync_file_range WRITE), and
// with `bound_dirty` waits for the previous such range, so a large file's
// dirty pages stay under ~2 x bytes and its final Sync (fdatasync, always
// still done) is short. bytes = 0: off. Any error of an early writeback is
// returned by that PWrite and by every later Sync of the file.
struct PosixWriteback {
  uint64_t bytes = uint64_t(64) << 20;
  bool bound_dirty = true;
};

// CKPT_WRITEBACK_MIB=N (every N MiB, Nk: KiB; unset or 0 = off, the default: no
// clear win measured, DESIGN "Early writeback"), CKPT_WRITEBACK_BOUND=0; read once.
PosixWriteback PosixWritebackFromEnvironment();

// How shard files are read (LoadOptions::direct_io, ChunkReader).
enum class DirectRead {
  kOff,   // through the page cache
  kOn,    // OpenOptions::direct (buffered where the filesystem refuses O_DIRECT)
  kAuto,  // per file: direct when under half of it is in the page cache
          // (File::PageCacheShare), else buffered: a cold file skips the
          // page-cache copy, a file still cached (a load right after a
          // buffered save) is not read from the disk again
};

// The default of ShardWriteOptions::direct_io (and so of every save): true
// unless CKPT_DIRECT_IO=0 (DESIGN "Direct IO"). Read once.
bool DirectIoFromEnvironment();
// The default of LoadOptions::direct_io: CKPT_DIRECT_IO unset -> kAuto,
// 0 -> kOff, anything else -> kOn. Read once.
DirectRead DirectReadFromEnvironment();
// "off", "on", "auto" (CLI and JSON reports).
const char* DirectReadName(DirectRead mode);

// The process-wide POSIX Env, PosixWritebackFromEnvironment(). Never deleted.
Env* DefaultEnv();
// A POSIX Env with the given writeback (tests, benchmarks). refuse_direct:
// OpenOptions::direct behaves as on a filesystem without O_DIRECT (tests of
// the fallback: tmpfs has O_DIRECT since Linux 6.6).
std::unique_ptr<Env> NewPosixEnv(PosixWriteback wb, bool refuse_direct = false);

// Forwards every call to a target Env; decorators override what they change.
class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(Env* target) : target_(target) {}
  Env* target() const { return target_; }
  Result<std::unique_ptr<File>> OpenFile(const std::string& p, OpenMode m, const OpenOptions& o = {}) override {
    return target_->OpenFile(p, m, o);
  }
  Status CreateDir(const std::string& p) override { return target_->CreateDir(p); }
  Status RemoveFile(const std::string& p) override { return target_->RemoveFile(p); }
  Status RemoveDir(const std::string& p) override { return target_->RemoveDir(p); }
  Status Rename(const std::string& f, const std::string& t) override { return target_->Rename(f, t); }
  Status RenameNoReplace(const std::string& f, const std::string& t) override {
    return target_->RenameNoReplace(f, t);
  }
  Status SyncDir(const std::string& p) override { return target_->SyncDir(p); }
  Result<std::vector<std::string>> ListDir(const std::string& p) override { return target_->ListDir(p); }
  Result<FileInfo> Stat(const std::string& p) override { return target_->Stat(p); }

 private:
  Env* target_;
};

// Forwards every File call to a target File it owns; decorators (fault
// injection, power loss, progress meters) override what they change, so a
// new File method reaches every decorator's target without edits there.
class FileWrapper : public File {
 public:
  explicit FileWrapper(std::unique_ptr<File> target) : target_(std::move(target)) {}
  File* target() const { return target_.get(); }
  const std::string& path() const override { return target_->path(); }
  Result<size_t> PRead(uint64_t offset, std::span<std::byte> dst) override { return target_->PRead(offset, dst); }
  Status PWrite(uint64_t offset, std::span<const std::byte> src) override { return target_->PWrite(offset, src); }
  Status Truncate(uint64_t size) override { return target_->Truncate(size); }
  Result<uint64_t> Size() override { return target_->Size(); }
  Status Sync() override { return target_->Sync(); }
  Status Close() override { return target_->Close(); }
  void WillNeed(uint64_t offset, uint64_t bytes) override { target_->WillNeed(offset, bytes); }
  DirectIoStats direct_io() const override { return target_->direct_io(); }
  double PageCacheShare() override { return target_->PageCacheShare(); }

 private:
  std::unique_ptr<File> target_;
};

// Helpers built only on the Env interface.
Result<std::string> ReadFileToString(Env* env, const std::string& path, const OpenOptions& opts = {});
// create/truncate, write, Sync, Close. Does not sync the directory.
Status WriteStringToFileSync(Env* env, const std::string& path, std::string_view data);
// tmp file + Sync + Rename + SyncDir(parent): the file is replaced atomically and durably.
// A stale "<path>.tmp" that is a link is removed itself first (never written
// through); one that is a directory or a FIFO/device is refused
// (kFailedPrecondition naming it). A link at `path` is replaced, not followed.
Status WriteFileAtomic(Env* env, const std::string& path, std::string_view data);
// Creates a directory and its missing parents (mkdir -p), syncing each parent
// whose entry list changed so the new directories survive power loss. An
// existing link to a directory counts as one (a root may be a link).
Status CreateDirs(Env* env, const std::string& path);
// Removes a directory tree (files and subdirectories) through the Env,
// never through a link: a link anywhere in it, `path` included, is removed
// itself and what it names is left untouched; a FIFO/device entry is
// unlinked. Each entry is Stat-ed before being descended into.
Status RemoveTree(Env* env, const std::string& path);
std::string JoinPath(const std::string& a, const std::string& b);
std::string DirName(const std::string& path);
std::string BaseName(const std::string& path);

}  // namespace ckpt
