// Which rank writes which shard: dedup of replicas and byte balancing.
//
// Every rank describes the tensor shards it holds (main replicas and
// replicas). Shards with the same identity (key, box, flat range) hold the
// same bytes by the replica contract, so exactly one holder writes each: the
// largest shards are placed first, each on its least-loaded holder (ties: the
// main-replica holder, then the lowest rank). Deterministic.
//
// Pure; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"

namespace ckpt {

struct HeldShard {
  std::string identity;  // ShardIdentity(meta)
  int64_t bytes = 0;
  bool main = false;
};

std::string ShardIdentity(const ShardedTensor& meta);

// Encodes/decodes one rank's held shards for the plan message.
std::string EncodeHeldShards(const std::vector<HeldShard>& held);
Result<std::vector<HeldShard>> DecodeHeldShards(std::string_view bytes);

struct WritePlan {
  std::vector<std::vector<int>> writes;  // per rank: indices into that rank's held list
  std::vector<int64_t> bytes_per_rank;
};

// held[r] = shards of rank r. Errors (kInvalidArgument, naming the shard):
// two ranks both claim the main replica of one shard; a shard held only as
// non-main replicas (nobody would write it) when `balance` is false.
Result<WritePlan> PlanWrites(const std::vector<std::vector<HeldShard>>& held, bool balance);

std::string EncodeWritePlan(const WritePlan& plan);
Result<WritePlan> DecodeWritePlan(std::string_view bytes);

}  // namespace ckpt
