// The harness's switches on an AsyncSaver (ckpt/protocol/async_save.h): a
// negative control and a test hook that are not part of the product API.
//
// * NoSnapshot - NEGATIVE CONTROL ONLY: Start copies nothing and the
//   background save reads the caller's live tensor buffers (objects are
//   still copied), so whatever the caller writes before the background save
//   has read them lands in the checkpoint - a checkpoint of no single
//   iteration. The caller's buffers must outlive the join. Never for real
//   saves.
// * BeforeSave - TEST HOOK: a function the background thread runs before it
//   starts SaveCheckpoint (before any data is read or written), so a test can
//   make "training overwrites the buffers first" or "the next save arrives
//   while this one is in flight" deterministic (a latch, or a delay).
//
// Set them before the first Start; not thread-safe with a save in flight.
#pragma once

#include <chrono>
#include <functional>

#include "ckpt/protocol/async_save.h"

namespace ckpt::testing {

class AsyncSaveControls {
 public:
  static void NoSnapshot(AsyncSaver& saver) { saver.copy_snapshot_ = false; }
  static bool Snapshots(const AsyncSaver& saver) { return saver.copy_snapshot_; }
  static void BeforeSave(AsyncSaver& saver, std::function<void()> fn) { saver.before_save_ = std::move(fn); }
  // BeforeSave that sleeps `delay` (a hold of a known length, not synchronisation).
  static void DelayBeforeSave(AsyncSaver& saver, std::chrono::milliseconds delay);
};

}  // namespace ckpt::testing
