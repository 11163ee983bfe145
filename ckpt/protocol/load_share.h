// Shared load reads: ranks of one group (LoadOptions::share_comm, e.g. the
// DP group as in MCore's fully parallel load, or the whole job) that need the
// same stored chunk read it from disk once.
//
// Protocol, per load attempt, collective over the group:
//  1. handshake  AllGather of each rank's needed chunks (global chunk ids as
//                ranges) plus its iteration and manifest size, or its error:
//                a rank that failed to read the manifest or plan fails every
//                rank of the group at once, with its status code (so a
//                fallback load still moves everyone to an older iteration).
//  2. assign     every rank computes the same assignment: a chunk one rank
//                needs is read by it; a chunk several need is read by the
//                needer with the fewest bytes to read so far (ties: lowest rank).
//  3. rounds     each reader's shared chunks, in file order, are cut into
//                rounds of at most share_round_bytes sent bytes; in round k
//                every rank reads (worker threads, hash checked) its chunks of
//                the round and its share of its private chunks, then one
//                AllToAll sends the stored bytes to the other needers, who
//                decode and scatter them. A rank that failed sends its error
//                instead; everyone stops after the round that carried it.
// Memory: per round, the bytes sent (<= share_round_bytes plus one chunk)
// and received, plus one chunk per worker. Every wait has opts.timeout.
// Errors name the reading rank, file, tensor and chunk.
#pragma once

#include <string>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/load_internal.h"

namespace ckpt {

// Fills the tensors of `state` as LoadTensors does, sharing reads over
// opts.share_comm. `m` is null and `cp` an error when this rank could not
// read the manifest or plan; it still takes part so the others fail fast.
Status SharedLoadTensors(ShardedStateDict& state, const Manifest* m, const Result<load_internal::ChunkPlan>& cp,
                         const std::string& dir, const LoadOptions& opts, Env* env, LoadStats* stats);

}  // namespace ckpt
