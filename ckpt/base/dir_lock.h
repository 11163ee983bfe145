// DirLock: an advisory exclusive lock (flock) on a directory, the lease of an
// in-progress save on its tmp dir. The holder keeps it until the DirLock is
// destroyed or the process dies (the kernel then drops it), so a tmp dir whose
// lock can be taken is provably abandoned. flock works across processes on one
// host and on file systems that support it across hosts (Lustre with -o flock,
// NFSv4 via byte-range locks); elsewhere it degrades to a per-host lease.
//
// errno becomes a Status here (env_posix.cc implements it, the OS edge).
// Thread-compatible: one DirLock per holder; two DirLocks on one directory
// conflict even within one process.
#pragma once

#include <memory>
#include <string>

#include "ckpt/base/status.h"

namespace ckpt {

class DirLock {
 public:
  // Locks directory `path` without waiting. kAlreadyExists when another
  // holder has it; kNotFound when the directory is gone.
  static Result<std::unique_ptr<DirLock>> TryLock(const std::string& path);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  const std::string& path() const { return path_; }

 private:
  DirLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  std::string path_;
  int fd_;
};

// "<host>-<pid>": names the owner of a save in its tmp dir name, for messages.
std::string ProcessOwnerTag();

}  // namespace ckpt
