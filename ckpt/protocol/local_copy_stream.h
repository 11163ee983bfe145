// Moving local-tier copies between ranks (local_tier.cc's replication and
// restore fetch): each copy, a committed one-rank iteration dir, streams from
// its files into the receiver's staging dir in rounds of at most `round_bytes`
// per pair over Comm::AllToAll. Why rounds: one message of a whole copy makes
// both sides touch (and the transport pin) every page of two fresh copy-sized
// buffers; on the bench VM that ran at ~35 MB/s, while rounds through buffers
// reused every round move ~300 MB/s (DESIGN log, issue 33). Memory per rank:
// about round_bytes per peer it sends to or receives from.
//
// Collective: every rank of `comm` calls StreamCopies together (with its own
// lists, possibly empty). A rank whose read or write fails keeps taking part
// in every round (sending nothing more), so no rank waits out a timeout; it
// returns its error and the caller agrees on the outcome (its job-wide vote).
// A receiver's staging dir holds the files complete and fsynced on success;
// it is never published here (the caller checks and renames it).
#pragma once

#include <string>
#include <vector>

#include "ckpt/base/comm.h"
#include "ckpt/base/env.h"

namespace ckpt {

struct CopySend {
  int to = -1;
  std::string dir;  // the iteration dir to send (all its files)
};
struct CopyRecv {
  int from = -1;
  std::string dir;  // the staging iteration dir to create and fill (must not exist)
};
struct StreamStats {
  int64_t sent_bytes = 0, received_bytes = 0;  // file bytes
  int64_t buffer_bytes = 0;                    // round buffers held at once (max)
  int rounds = 0;
};

Result<StreamStats> StreamCopies(Env* env, Comm* comm, const std::vector<CopySend>& sends,
                                 const std::vector<CopyRecv>& recvs, int64_t round_bytes, Millis timeout, Phase phase);

}  // namespace ckpt
