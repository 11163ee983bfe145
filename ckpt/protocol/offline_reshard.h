// Offline resharding: rewrite a committed checkpoint under another layout
// without running a job of that layout. One process stands in for every target
// rank in turn: it builds the rank's state (descriptors + zeroed buffers) with
// the caller's factory, fills it with LoadCheckpoint (the same planned,
// hash-checked reads as an online load), writes the rank's main replicas into
// its shard file, frees the state and moves on. The result is committed with
// the normal protocol (commit.h), so a crash leaves no visible partial output;
// a failed or refused reshard also removes the destination directories it
// created (created_dirs.h), so it leaves no empty destination behind.
//
// Nothing is dropped silently: a source tensor no target rank requests, or a
// per-rank object, fails the reshard (kFailedPrecondition naming them);
// single-cell objects (layout-free blobs such as resume state) the factory
// does not request are carried over unchanged. Per-rank objects whose key the
// caller names in drop_objects (e.g. an RNG state on a (pp, tp) grid, which
// has no meaning under another TP, as Megatron's --no-load-rng) are left out
// explicitly; the result's metadata lists them under "dropped_objects".
// Memory: one target rank's state at a time plus the loader's read buffers.
// Thread-compatible.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"

namespace ckpt {

// A target rank's state; the factory returns one per rank.
class RankState {
 public:
  virtual ~RankState() = default;
  virtual ShardedStateDict& dict() = 0;
};
using RankStateFactory = std::function<Result<std::unique_ptr<RankState>>(int rank)>;

struct OfflineReshardOptions {
  std::string src_root;
  int64_t src_iteration = -1;  // -1: the tracker's
  std::string dst_root;
  int64_t dst_iteration = -1;  // -1: same as the source
  int world_size = 1;          // target ranks
  nlohmann::json layout = nlohmann::json::object();    // target layout, recorded in the manifest
  nlohmann::json metadata = nlohmann::json::object();  // recorded in the manifest
  std::set<std::string> drop_objects;  // per-rank object keys to leave out, explicitly
  ShardWriteOptions write;
  Env* env = nullptr;
};

struct OfflineReshardStats {
  int64_t src_iteration = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;  // raw tensor bytes
  int64_t elements = 0;
  double seconds = 0;
};

Result<OfflineReshardStats> ReshardOffline(const OfflineReshardOptions& opts, const RankStateFactory& factory);

}  // namespace ckpt
