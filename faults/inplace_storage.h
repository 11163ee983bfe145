// The non-atomic commit of Megatron-LM's torch_dist save as a Storage: the
// negative control of the atomic commit (M115, `ckpt faults run
// --in-place-commit`). Never a backend of a real root: no URL scheme reaches
// it; a test hands it to SaveOptions::storage.
//
// What it does, step for step like MCore (HEAD d98e8a64: save_checkpoint in
// megatron/training/checkpointing.py writes the tracker with
// open(tracker_filename, 'w'); dist_checkpointing/serialization.py save runs
// metadata_finalize_fn -> core.py save_config, writing metadata.json last):
//  - Stage:        mkdir <root>/iter_N directly; the rank files go there (no
//                  tmp dir, no lease, nothing renamed later);
//  - Publish:      the StepHook steps in the contract's order, then
//                  manifest.json written in place with a plain truncating
//                  open + write and no fsync (MCore's metadata.json, written
//                  last in finalize): the completion marker, not atomic and
//                  not durable;
//  - WriteTracker: the tracker rewritten in place (open O_TRUNC, write, no
//                  fsync, no rename: Python's open(tracker, 'w')), so a crash
//                  between the truncation and the write leaves it empty;
//  - Abandon:      nothing (a failed save's files stay in iter_N, as MCore
//                  leaves them).
// A crash therefore leaves an incomplete iter_N that every lister sees, and
// maybe an empty tracker: the states the atomic commit (fs_storage.cc) never
// shows. Listing, reading the tracker and deleting are the POSIX backend's.
// Thread-safety: as the POSIX backend.
#pragma once

#include <memory>
#include <string>

#include "ckpt/storage/storage.h"

namespace ckpt::faults {

// `root` is a file system path; all IO goes through `env` (a FaultEnv, so a
// campaign traces and crashes these operations like the atomic ones).
std::unique_ptr<Storage> NewInPlaceStorage(Env* env, const std::string& root);

}  // namespace ckpt::faults
