// FsStorage: the Storage of a root on a file system with atomic renames,
// over any Env (POSIX, the in-memory MemEnv, or a fault/power-loss wrapper of
// either). The commit is the rename of the staging directory to iter_N; the
// lease of a staging directory comes from a LeaseFn (POSIX: flock, DirLock in
// ckpt/base/dir_lock.h; memory: a process-wide table). Internal to
// ckpt/storage: users open roots with OpenStorage / NewPosixStorage.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "ckpt/storage/storage.h"

namespace ckpt {

// Held for as long as a staging directory is live; destroying it ends it.
class Lease {
 public:
  virtual ~Lease() = default;
};
// Takes the lease of directory `dir` without waiting: kAlreadyExists when
// another holder has it, kNotFound when the directory is gone.
using LeaseFn = std::function<Result<std::unique_ptr<Lease>>(const std::string& dir)>;

// `root` is the Env path of the root; `url` names it in messages.
std::unique_ptr<Storage> NewFsStorage(Env* env, std::string url, std::string root, LeaseFn lease);

// "<host>-<pid>-<16 hex>": a fresh staging name suffix (owner + nonce).
std::string NewStagingNonce();

}  // namespace ckpt
