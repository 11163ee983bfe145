// ApplyPowerLoss: rewinds the real files to a state the kernel could have
// left when the power went off, from the PowerLossEnv journals of every
// process of a job (power_loss_env.h).
//
// Model. A write or truncation is durable once a later successful Sync of its
// file happened before the cut; a create, mkdir, remove, rmdir or rename once
// a later successful SyncDir of its directory did (a rename needs both
// directories). Names are tracked by identity, so renaming a directory keeps
// what was synced inside it. Files and directories that existed before the
// journals began count as durable. Anything journaled after the cut is undone.
// For the rest, the mode decides:
//   kDropAll      every non-durable change is lost (leveldb's fault env);
//   kKeepPrefix   a random prefix (in time order) of the non-durable name
//                 changes survives, and per file a random prefix of its
//                 non-durable writes (an ordered journal, delayed allocation);
//   kTornSectors  names as kKeepPrefix; each 4 KiB sector a non-durable write
//                 touched independently holds the new or the old bytes (zeros
//                 where there were none), and the file keeps either its old
//                 or its new size (SQLite's crash VFS).
// Deterministic for a given journal set, cut, mode and seed.
//
// Failure: journal corruption is kCorruption; Env errors while rewinding are
// returned (the directory is then in an undefined state). Thread-compatible;
// run it only after every journaling process has ended.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"

namespace ckpt::faults {

enum class PowerLossMode { kDropAll, kKeepPrefix, kTornSectors };

std::string_view PowerLossModeName(PowerLossMode m);  // "drop", "prefix", "torn"
Result<PowerLossMode> ParsePowerLossMode(std::string_view name);

inline constexpr uint64_t kSectorBytes = 4096;

struct PowerLossReport {
  int64_t records = 0;
  int64_t cut_ns = 0;           // INT64_MAX: cut after everything journaled
  int64_t names_undone = 0;     // name changes rolled back
  int64_t names_kept = 0;       // non-durable name changes that survived
  int64_t files_rewound = 0;    // files whose content changed
  int64_t writes_dropped = 0;   // non-durable writes/truncations lost (wholly)
  int64_t writes_kept = 0;      // non-durable ones that survived (prefix mode)
  int64_t sectors_old = 0;      // torn mode: touched sectors left with old bytes
  int64_t sectors_new = 0;      // torn mode: touched sectors with the new bytes
  std::string ToString() const;
};

Result<PowerLossReport> ApplyPowerLoss(Env* env, const std::vector<std::string>& journal_paths, int64_t cut_ns,
                                       PowerLossMode mode, uint64_t seed);

// The journal directory convention of `ckpt faults child --power-dir`: every
// "*.journal" file in `dir`, cut time from `dir`/cut (absent: no cut).
std::string CutMarkerPath(const std::string& dir);
std::string JournalPath(const std::string& dir, int rank);
Result<PowerLossReport> ApplyPowerLossDir(Env* env, const std::string& dir, PowerLossMode mode, uint64_t seed);

}  // namespace ckpt::faults
