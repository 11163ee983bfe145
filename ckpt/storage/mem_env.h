// MemEnv: an Env holding its files in memory (leveldb's helpers/memenv), the
// file system under the in-memory storage backend (mem:// roots, unit tests
// and the conformance suite). Same contract as the POSIX Env (env.h) where it
// applies: RenameNoReplace never replaces, RemoveDir wants an empty dir,
// ListDir is sorted, a missing entry is kNotFound naming the path, an
// existing one kAlreadyExists. No links, no direct IO; Sync and SyncDir
// succeed at once (nothing is lost but at process exit). Thread-safe (one
// mutex: it is for tests, not speed).
#pragma once

#include <memory>

#include "ckpt/base/env.h"

namespace ckpt {

// A fresh, empty in-memory file system ("/" exists).
std::unique_ptr<Env> NewMemEnv();

}  // namespace ckpt
