// The local checkpoint tier: frequent saves of each rank's own state into a
// node-local directory, replicated to R other nodes over the job's Comm, with
// a job-wide local commit; and the restart that restores from it (fetching a
// lost node's files from the peers that hold its replicas).
//
// On disk, per node (LocalTierOptions::NodeDir):
//   <node>/rank_<r>/iter_N/   rank r's own state, or a replica of it, as a
//                             one-rank ckpt checkpoint (manifest + one shard
//                             file, SHA-256 per chunk) of its *local view*:
//                             each key's local pieces end to end in one 1-D
//                             tensor (LocalView). Written
//                             through SaveCheckpoint (own) or received and
//                             verified before a rename (replica): a torn copy
//                             is never an iter_N.
//   <node>/LOCAL_COMPLETE     {"iteration": N, "world": W, "ranks_per_node":
//                             P, "layout": ...}: written (tmp, fsync, rename,
//                             fsync dir) by each node's first rank only after
//                             every rank reported its own copy and all its
//                             replicas committed and hash-verified.
//
// Local commit guarantee: iteration N is usable iff some node's marker names
// N and every rank's copy of N is present on some node. Nothing of an older
// complete iteration is removed before the marker of a newer one is durable
// on that node, so a crash at any point (a rank, a node, mid-write,
// mid-replication, mid-commit) leaves the previous complete iteration usable.
//
// Placement: node(r) = r / ranks_per_node (block placement, as mpirun's
// default by-slot mapping); rank r's replicas go to nodes node(r)+1 ..
// node(r)+R (mod nodes), to the rank with r's local index there. The R+1
// copies lie on R+1 distinct nodes, so losing any R nodes loses no shard
// (R < nodes is required).
//
// Collective: LocalSave, ChooseResumeTier and LocalRestore are called by every
// rank of opts.comm together; every wait is bounded by opts.timeout.
// Errors name the rank, the iteration and the phase.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"

namespace ckpt {

struct LocalTierOptions {
  // Node-local directory; "{node}" in it is replaced by the node index (one
  // host simulating nodes); without it every node uses the same path, which
  // must then be private to the node (a node-local disk or tmpfs).
  std::string dir;
  int ranks_per_node = 1;
  int replicas = 1;
  Env* env = nullptr;    // nullptr: DefaultEnv()
  Comm* comm = nullptr;  // the job's; nullptr: one rank
  Millis timeout{60000};
  ShardWriteOptions write;
  nlohmann::json layout = nlohmann::json::object();  // must match for a local restore
  // An older iteration the save's clean-up must keep (-1: none): the one a
  // background global drain is still reading (the same on every rank).
  int64_t pinned = -1;
  // Copies move between ranks in rounds of at most this many bytes per pair
  // (local_copy_stream.h: buffers reused every round, not one copy-sized
  // message); the memory a rank holds for them is about this per peer.
  int64_t round_bytes = int64_t(1) << 20;
  // Named steps: SaveCheckpoint's own (the rank's local write) plus
  // "local_replicate" (before sending), "local_receive" (before a replica's
  // rename), "local_vote", "local_marker" (before the marker write),
  // "local_gc"; a non-OK return fails the save there (faults/ crashes here).
  StepHook hook;

  int node_of(int rank) const { return rank / ranks_per_node; }
  std::string NodeDir(int node) const;
  // The ranks that hold replicas of `rank` (R of them, on distinct nodes).
  std::vector<int> ReplicaHolders(int rank, int world) const;
  // Checks ranks_per_node divides world, 0 <= replicas < nodes, and that no
  // two nodes on one host (comm's host names) share a directory.
  Status Validate(int world) const;
  Status CheckNodeDirsDistinct(int nodes) const;
};

// This rank's state as a one-rank checkpoint: the pieces of each key laid end
// to end (dict order) in one 1-D main-replica tensor of that key, no flat
// range; objects become main replicas. Same data spans as `sd`.
ShardedStateDict LocalView(const ShardedStateDict& sd);

struct LocalSaveStats {
  int64_t iteration = 0;
  int64_t own_bytes = 0;       // this rank's local files (manifest + shard)
  int64_t sent_bytes = 0;      // network: replicas sent by this rank
  int64_t received_bytes = 0;  // network: replicas received by this rank
  int64_t buffer_bytes = 0;    // memory: send + receive buffers held at once
  double write_seconds = 0;    // the blocking part: own files written and committed
  double replicate_seconds = 0;
  double commit_seconds = 0;
  double seconds = 0;
};

// Saves `sd` (this rank's state) as local iteration `iteration`, replicates
// and commits it. On error the iteration is not complete (never marked) and
// the previous complete one stays usable.
Result<LocalSaveStats> LocalSave(const ShardedStateDict& sd, int64_t iteration, const LocalTierOptions& opts);

struct TierChoice {
  std::string tier;        // "local", "global" or "none"
  int64_t iteration = -1;  // -1 with "none"
  std::string why;
  int64_t local_iteration = -1;   // newest complete local iteration found (-1: none usable)
  int64_t global_iteration = -1;  // newest committed global iteration (-1: none)
};

// Picks the newest iteration complete in some tier: rank 0 gathers every
// node's marker and holdings and reads the global root's latest; every rank
// gets the same choice. The local tier is chosen when its iteration is at
// least the global one, the layout (world, ranks per node, layout json)
// matches, and every rank's copy is held by some node.
Result<TierChoice> ChooseResumeTier(const LocalTierOptions& opts, const std::string& global_root);

struct LocalRestoreStats {
  int64_t iteration = 0;
  int64_t fetched_bytes = 0;  // this rank's copy fetched from a peer (0: its node had it)
  int64_t sent_bytes = 0;     // copies this rank sent to others
  int from_rank = -1;         // the peer it came from (-1: own node)
  double fetch_seconds = 0;   // holdings exchange + the peers' copies sent and received
  double load_seconds = 0;    // loading this node's copy (chunk hashes checked)
  double keep_seconds = 0;    // a fetched copy staged in, and published to, this node's dir
  double seconds = 0;
  LoadStats load;
};

// Restores `request` (this rank's state dict, same layout as saved) from
// local iteration `iteration`: a rank whose node holds its copy loads it from
// there; a rank whose node lacks it gets it from a holder, stages it on this
// node, loads it from the staging dir (the load's chunk hash checks are the
// check on arrival: no separate verify pass) and then publishes it (rename:
// a torn or damaged copy is never an iter_N). Every chunk hash is checked
// exactly once. The loads use DefaultWorkerThreads(opts.comm) workers each
// (the node's cores shared by its ranks, as a job's load). Collective.
Result<LocalRestoreStats> LocalRestore(ShardedStateDict& request, int64_t iteration, const LocalTierOptions& opts);

// A global save drained from the local tier (the CLI's `train --local-dir`,
// ckpt.TieredCheckpointer): DrainBuffers gives `live`'s tensors and objects
// (metadata only) over buffers of the drain's own, `*buf` (resized to fit,
// reused across drains), so training may go on changing `live`.
// DrainLocalCopy then reads this rank's committed local copy (`from`: its
// root, iteration, Env; strict, chunk hashes checked) into `sd` and saves it
// with `to`. A failed read still joins the save's collectives: its "plan"
// step fails the save on every rank, naming this one; this rank returns the
// read's error with `context`. Collective over to.comm.
ShardedStateDict DrainBuffers(const ShardedStateDict& live, std::vector<std::byte>* buf);
Result<SaveStats> DrainLocalCopy(ShardedStateDict& sd, const LoadOptions& from, SaveOptions to,
                                 const std::string& context);

}  // namespace ckpt
