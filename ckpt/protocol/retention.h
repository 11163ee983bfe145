// Retention: which committed iterations under a root to delete after a save,
// and the deletion itself (Megatron-LM's --save-retain-interval, plus a
// keep-the-newest-N rule).
//
// Policy: an iteration is kept if it is the newest committed one, one of the
// newest `keep_last`, or a multiple of `keep_every`; every other committed
// iteration is deleted. Both 0: retention is off (nothing is deleted).
//
// Safety contract of ApplyRetention (what Megatron-LM's order lacks: it
// deletes the previous iteration right after a plain, unsynced tracker write):
//  - call it only after SaveCheckpoint of `newest` returned OK with an OK
//    warning, i.e. the new iteration's dir rename, the root fsync and the
//    durable tracker replacement are done; it re-checks that the tracker names
//    `newest` and that `newest` is the newest committed iteration, and deletes
//    nothing otherwise (kFailedPrecondition naming what it found);
//  - it never deletes `newest` or anything newer;
//  - a victim is first renamed to a tmp name (".iter_N.tmp-<owner>-<hex>"),
//    the root fsynced, then removed: after a crash there is either the whole
//    committed iteration or a tmp dir the next save's cleanup removes, never a
//    half-deleted iter_N that "latest" could pick;
//  - nothing is deleted through a link: a victim iter_N that is a symbolic
//    link (to an archived iteration, say) loses the link only, its target is
//    left as it is (RetentionResult::unlinked); a link inside a victim is
//    likewise removed itself (RemoveTree).
// Single process (rank 0 of a job); not thread-safe against another process
// applying retention to the same root.
#pragma once

#include <cstdint>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/storage/storage.h"
#include "ckpt/base/status.h"

namespace ckpt {

struct RetentionPolicy {
  int64_t keep_last = 0;   // keep the newest N committed iterations (0: no such rule)
  int64_t keep_every = 0;  // keep multiples of K (Megatron-LM --save-retain-interval; 0: none)
  bool enabled() const { return keep_last > 0 || keep_every > 0; }
};

// kInvalidArgument for a negative field.
Status ValidateRetention(const RetentionPolicy& p);

// Iterations of `committed` (ascending) the policy deletes once `newest` is
// durable. Pure. Never contains `newest` or anything >= it.
std::vector<int64_t> RetentionVictims(const std::vector<int64_t>& committed, int64_t newest,
                                      const RetentionPolicy& p);

struct RetentionResult {
  std::vector<int64_t> deleted;  // ascending
  std::vector<int64_t> unlinked;  // of `deleted`, those that were links: the link removed, the target kept
  std::vector<int64_t> kept;     // committed iterations left, ascending
};

// Deletes the victims under root (see the contract above). An error leaves
// the iterations not yet handled in place; those already renamed are gone.
Result<RetentionResult> ApplyRetention(Env* env, const std::string& root, int64_t newest,
                                       const RetentionPolicy& p);
// The same on an opened root (any backend).
Result<RetentionResult> ApplyRetention(Storage* storage, int64_t newest, const RetentionPolicy& p);

}  // namespace ckpt
