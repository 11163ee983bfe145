// Power-loss simulation (in the spirit of SQLite's crash VFS and leveldb's
// FaultInjectionTestEnv), for one process or for every rank of a job.
//
// PowerLossEnv forwards every call to its target and, before each mutating
// one, appends an undo/redo record to a journal: the bytes a write overwrote
// and the bytes it wrote, a truncation's lost tail, the content of a file a
// remove or a replacing rename destroyed, and the creates, mkdirs and renames
// themselves. Successful Sync / SyncDir calls are journaled when they return.
// The journal is a plain file outside the simulated disk (written with
// write(2), never synced: it models the experimenter's notebook, not the
// machine), one per process, so the records of all ranks of a job can be
// merged afterwards by their monotonic timestamps.
//
// A power cut is a marker file holding the cut time (Cut()). Every
// PowerLossEnv checks the marker before each call and, once it exists, ends
// its process at once (_exit(kPowerCutExitCode)) without touching the disk:
// all ranks lose power together, whichever rank's fault cut it.
// ApplyPowerLoss (power_loss.h) then rewinds the real files to a state the
// kernel could have left at the cut.
//
// Cost: the journal holds every byte written (and overwritten) while active;
// meant for test-sized checkpoints. Thread-safety: as the Env contract; calls
// that change the disk are serialised by one mutex so the journal order is the
// order of effects within the process.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"

namespace ckpt::faults {

enum class JournalOp : uint8_t {
  kCreate = 1,    // path; a = 1 if it existed (data = its old content, truncated by the create)
  kWrite = 2,     // path; a = offset, b = size before; pre = overwritten bytes, data = written bytes
  kTruncate = 3,  // path; a = new size, b = size before; pre = bytes cut off
  kSync = 4,      // path: the file's data is durable (journaled after success)
  kMkdir = 5,     // path
  kRemove = 6,    // path; data = its content
  kRmdir = 7,     // path
  kRename = 8,    // path -> path2; a = 1 if path2 (a file) was replaced (data = its content)
  kSyncDir = 9,   // path: the directory's entries are durable (journaled after success)
};

struct JournalRecord {
  JournalOp op = JournalOp::kSync;
  int rank = 0;
  int64_t seq = 0;   // per process, from 1
  int64_t ts = 0;    // MonotonicNs() when journaled
  std::string path, path2;
  uint64_t a = 0, b = 0;
  std::string pre, data;
};

std::string EncodeJournalRecord(const JournalRecord& r);
// Decodes a journal; an incomplete last record (the process died mid-append)
// is dropped: it was journaled before its operation, so that never ran.
Result<std::vector<JournalRecord>> DecodeJournal(std::string_view bytes, const std::string& what);

class PowerLossEnv : public EnvWrapper {
 public:
  struct Options {
    std::string journal_path;  // created (truncated) by Create
    std::string cut_marker;    // existence = power is off
    int rank = 0;
  };
  static Result<std::unique_ptr<PowerLossEnv>> Create(Env* target, Options opts);
  ~PowerLossEnv() override;

  // Cuts the power for every process sharing cut_marker: writes the marker
  // (atomically, with the cut time). Does not return to the disk: the caller
  // must end the process. Safe to call from any thread.
  void Cut();
  // Ends the process if the power is off (called before every operation).
  void CheckPower();

  Result<std::unique_ptr<File>> OpenFile(const std::string& path, OpenMode mode,
                                         const OpenOptions& o = {}) override;
  Status CreateDir(const std::string& path) override;
  Status RemoveFile(const std::string& path) override;
  Status RemoveDir(const std::string& path) override;
  Status Rename(const std::string& from, const std::string& to) override;
  Status RenameNoReplace(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& path) override;
  Result<std::vector<std::string>> ListDir(const std::string& path) override;
  Result<FileInfo> Stat(const std::string& path) override;

  // Used by the File wrapper: journal `r` (seq and ts are filled in).
  void Journal(JournalRecord r);
  std::mutex& mu() { return mu_; }

 private:
  PowerLossEnv(Env* target, Options opts, int fd) : EnvWrapper(target), opts_(std::move(opts)), fd_(fd) {}
  Status DoRename(const std::string& from, const std::string& to, bool no_replace);

  Options opts_;
  int fd_;
  std::mutex mu_;
  int64_t seq_ = 0;
};

// Reads a cut marker: the cut time, or INT64_MAX if there is none (no cut:
// the power goes off after everything journaled).
Result<int64_t> ReadCutMarker(const std::string& path);

}  // namespace ckpt::faults
