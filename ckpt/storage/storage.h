// Storage: the one seam a checkpoint root's backend implements (issue 32).
//
// A root is a URL: a plain path or file:///abs/path (POSIX), mem://name (the
// in-memory backend of unit tests), s3://bucket/prefix (the S3 backend), ...;
// OpenStorage picks the backend by scheme from a registry. Everything a
// backend must decide lives behind this interface:
//   - staging a save and its lease     Storage::Stage -> StagedSave
//   - publishing it atomically         StagedSave::Publish
//   - reading / writing the tracker    Storage::ReadTracker / WriteTracker
//   - listing iterations               Storage::ListIterations
//   - deleting one (retention)         Storage::DeleteIteration
//   - byte-range reads and file IO     Storage::env() (File::PRead at any offset;
//                                      an object store maps it to a range GET)
//   - durability                       every OK below is durable (see each)
// The protocol (ckpt/protocol) decides what to write (plans, shard files,
// manifests, votes); it never renames, locks or lists a root itself.
// tests/support/storage_conformance.h is the executable form of this contract:
// a backend is done when that suite passes over it (docs/STORAGE.md).
//
// Layout under a root (docs/FORMAT.md), the same on every backend:
//   <root>/latest_checkpointed_iteration.txt      the tracker, "N\n"
//   <root>/iter_000000N/manifest.json             written last: the commit
//   <root>/iter_000000N/rank_0000R.h5             shard files
// Paths are Env paths built with JoinPath(root(), ...) and
// JoinPath(StagedSave::dir(), name); what they look like is the backend's
// business (POSIX: file system paths; S3: e.g. "s3://bucket/prefix/...").
//
// Errors: Status codes as everywhere (kNotFound: nothing there;
// kAlreadyExists: a conflicting save or iteration; kFailedPrecondition: the
// root holds something ckpt did not make; kIOError / kNoSpace / kTimeout:
// the medium), each message naming the URL or path (never a credential).
// Thread-safety: a Storage is thread-safe; a StagedSave is used by one
// thread at a time (its files may be written from many threads via env()).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"

namespace ckpt {

// Called at each named protocol step; a non-OK return fails the save there
// (faults/ crashes, hangs or fails a rank mid-protocol through it). The save
// steps a backend runs, in this order, each exactly once per Publish:
//   "manifest_write"  before any byte of the manifest is written
//   "manifest_rename" after the manifest's bytes are durable, before it is
//                     made the iteration's manifest (POSIX: its rename)
//   "dir_rename"      immediately before the commit point (POSIX: the
//                     directory rename; object stores: the manifest PUT)
//   "root_fsync"      after the iteration is visible, before Publish makes
//                     its visibility durable
// and "tracker_update" first in WriteTracker. A backend whose steps coincide
// still runs each hook once, in this order, so fault campaigns work unchanged.
using StepHook = std::function<Status(std::string_view step, int rank)>;

// A save in progress: a staging area its files are written into (through the
// Storage's env(), at JoinPath(dir(), name)) plus the lease that marks it live.
//  - The lease is held from Stage until this object is destroyed. While it is
//    held no other Stage (any process, any host the backend covers) removes
//    the staging area or stages the same iteration.
//  - Destroying it without Publish or Abandon is what a crash does: the lease
//    ends, the staged bytes stay, and a later Stage of any iteration removes
//    them (they are abandoned). Nothing staged is ever visible to readers.
//  - It stays valid after the Storage that made it is destroyed.
class StagedSave {
 public:
  virtual ~StagedSave() = default;
  virtual int64_t iteration() const = 0;
  // The Env path of the staging area (POSIX: "<root>/.iter_N.tmp-<host>-<pid>-<hex>").
  virtual const std::string& dir() const = 0;

  // The commit: writes `manifest` as the iteration's manifest.json last,
  // after every staged file is durable (the caller has Synced them), and
  // makes iteration N visible whole. Atomic: a reader (ListIterations, a
  // load) sees either no iteration N or N with its complete manifest and
  // every staged file, never part of it. Never replaces an existing
  // iteration N (kAlreadyExists naming it: another writer committed first).
  // *published turns true at the commit point (from then on N is visible and
  // must never be removed by this save); an error after it says N is visible
  // but may not survive a crash (the caller reports kOutcomeUnknown-style).
  // OK: committed and durable. Call once; hook steps: see StepHook.
  virtual Status Publish(std::string_view manifest, const StepHook& hook, bool* published) = 0;

  // A save that failed before Publish: removes the staged files now, under
  // the lease (best effort is fine: what is left is abandoned, see above).
  virtual Status Abandon() = 0;
};

// One checkpoint root. Methods name the root's URL in their errors.
class Storage {
 public:
  virtual ~Storage() = default;

  // The URL as opened (for messages; never carries credentials).
  virtual const std::string& url() const = 0;
  // The root as an Env path (POSIX: "/data/run1" for "file:///data/run1").
  virtual const std::string& root() const = 0;
  // File IO under root(): reading manifests and shard files (PRead at any
  // offset and length is the byte-range read), writing staged files. Files
  // opened for writing are visible to readers only after Publish. Lives as
  // long as the Storage.
  virtual Env* env() = 0;

  // Starts a save of `iteration`: first removes abandoned staging areas (those
  // whose lease nobody holds; live ones are left alone), then refuses
  //  - an iteration that exists (kAlreadyExists naming it),
  //  - a live save of the same iteration (kAlreadyExists naming its owner),
  // then runs `precheck` (if given: the caller's own refusal, e.g. of an
  // iteration older than the newest listed; its error is returned and
  // nothing is created), creates the root if needed and a fresh staging
  // area, and returns it with its lease held. Runs no hook (the caller runs
  // "begin").
  virtual Result<std::unique_ptr<StagedSave>> Stage(int64_t iteration,
                                                    const std::function<Status()>& precheck = nullptr) = 0;

  // Iterations visible under the root, ascending. A published iteration is
  // listed from the moment Publish passed its commit point; a staged one
  // never. (POSIX also lists an iter_N that is a link to a directory: an
  // archived iteration.) The caller verifies the manifest of what it reads.
  virtual Result<std::vector<int64_t>> ListIterations() = 0;

  // The tracker: the iteration last recorded by WriteTracker. kNotFound when
  // there is none; kCorruption when it does not hold an iteration number.
  // A lower bound only: LatestIteration also looks at listed iterations.
  virtual Result<int64_t> ReadTracker() = 0;
  // Replaces the tracker atomically (a reader sees the old or the new value,
  // never a mix or nothing) and durably (OK: survives a crash). Runs the
  // "tracker_update" hook first (rank 0).
  virtual Status WriteTracker(int64_t iteration, const StepHook& hook) = 0;

  // Retention: removes iteration N so that no reader ever sees it half
  // deleted (first it stops being listed, durably, then its files go; a
  // crash in between leaves bytes a later Stage removes). An iteration that
  // is not there: OK. *was_link (if given): N was a link (POSIX) and only the
  // link was removed, what it names is untouched.
  virtual Status DeleteIteration(int64_t iteration, bool* was_link = nullptr) = 0;
};

// Options for OpenStorage; a backend ignores what it does not use.
struct StorageOptions {
  // The Env a filesystem backend (file, mem) does its IO through: a fault
  // injecting or power-loss wrapper in tests (they decorate any Env through
  // EnvWrapper/FileWrapper). nullptr: the backend's own (file: DefaultEnv()).
  Env* env = nullptr;
};

// Makes a backend for a URL of its scheme ("s3://bucket/prefix" for "s3").
using StorageFactory =
    std::function<Result<std::unique_ptr<Storage>>(const std::string& url, const StorageOptions& opts)>;

// Registers `scheme` (lower case, no "://"). kAlreadyExists when taken.
// "file" and "mem" are built in. Thread-safe.
Status RegisterStorageScheme(const std::string& scheme, StorageFactory factory);
// The scheme of a URL: "s3" for "s3://b/p"; "file" for a plain path and for
// "file:///abs". Pure.
std::string UrlScheme(const std::string& url);
// Opens the root `url` with the backend registered for its scheme. Opening
// does no IO that could fail on a fresh root (the root need not exist yet).
// kInvalidArgument for an unknown scheme (listing the registered ones) or a
// malformed URL.
Result<std::unique_ptr<Storage>> OpenStorage(const std::string& url, const StorageOptions& opts = {});

// Backends built in (also reachable by URL):
// POSIX root `root` (a path) with IO through `env` (nullptr: DefaultEnv()).
std::unique_ptr<Storage> NewPosixStorage(Env* env, const std::string& root);
// The in-memory backend: mem://<name> roots of one process share one
// in-memory file tree (MemEnv), so two OpenStorage("mem://x") see the same
// checkpoints; leases are per StagedSave, like POSIX flocks. For unit tests.
// `env` (nullptr: the shared MemEnv) lets a test decorate it.
std::unique_ptr<Storage> NewMemStorage(const std::string& url, Env* env = nullptr);
// The process-wide in-memory Env under mem:// roots (paths "mem://name/...").
Env* SharedMemEnv();

}  // namespace ckpt
