// The write and vote of a save as rounds that measure progress, not a race
// with the slowest writer (issue 28): a rank that keeps writing is alive
// however long its share takes; a rank whose writes stop is named within the
// deadline.
//
// Each rank writes its file on a worker thread through a ProgressEnv, which
// counts the file operations that completed. The rank's own thread meanwhile
// takes part in rounds, every rank in step (Comm::GatherDecide, phase 'vote'):
// each round it waits up to ProgressInterval(timeout) for its writer, then
// sends a round message - still writing (its count so far), its vote (once:
// the outcome of its write), or "voted" - and root answers "go on" or the
// final outcome. Root (VoteTally) decides at once on a failed vote, commits
// when every rank voted, and fails the save when a still-writing rank's count
// did not move for a whole deadline: "no progress from rank(s) R within T ms
// in phase 'vote'". A rank that stops answering rounds is named by the
// gather's own deadline, as before. Only the existing collectives carry it,
// so it works over every Comm (MPI, threads, the Python TorchComm).
// Which failure decides a round (and the plan gather before it) is
// AgreeStatus's rule, through its code (RoundFailure: agree.h FirstOrigin),
// so a save and every other agreement name the same culprit.
//
// Wire (binary, one tag byte; the vote and outcomes are status_wire.h forms):
//   rank -> root  'W' + uint64 LE count | 'V' + vote outcome | 'D' (voted before)
//   root -> ranks 'G' (go on)           | 'F' + final outcome
// Decoding is checked: anything else is kInternal naming it.
//
// Thread-safety: ProgressEnv's counter and cancel flag are atomics (the writer
// thread counts, the rank's thread reads); VoteTally is used by root's thread only.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/base/comm.h"
#include "ckpt/base/env.h"
#include "ckpt/base/phase.h"
#include "ckpt/base/status.h"

namespace ckpt {

// How long a rank waits for its writer before a round: timeout / 4, within
// [1 ms, 1 s]. Root therefore hears from a live rank several times a deadline.
Millis ProgressInterval(Millis timeout);

// A non-root rank whose wait for root's decision expired (root commits inside
// that wait: manifest, rename, fsyncs) looks on disk this long for root's files
// to change before it reports the timeout; a change means root is still
// working, and buys it another deadline (save.cc AwaitOutcomeOnDisk).
inline constexpr Millis kRootCommitLook{250};

// Forwards to `target`, counting every file operation that completed (open,
// pwrite, pread, sync, truncate, close: a write of many small pieces and an
// fsync that ends both move it). After Cancel() every further write fails
// with kAborted, so a rank stops writing soon after the save failed elsewhere.
class ProgressEnv final : public EnvWrapper {
 public:
  explicit ProgressEnv(Env* target) : EnvWrapper(target) {}
  Result<std::unique_ptr<File>> OpenFile(const std::string& p, OpenMode m, const OpenOptions& o = {}) override;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  void Tick() { count_.fetch_add(1, std::memory_order_relaxed); }
  void Cancel() { cancelled_ = true; }
  bool cancelled() const { return cancelled_; }

 private:
  std::atomic<uint64_t> count_{0};
  std::atomic<bool> cancelled_{false};
};

// The failure that decides a gather of the save (the plan's messages, the
// votes so far), by AgreeStatus's rule (agree.h FirstOrigin: the lowest
// origin rank, the origin's own report before a peer's relay, then the lowest
// sender), or OK if none failed. `outcomes` are status_wire.h outcomes, index
// = the sending rank; an empty one has not arrived yet (OK); a garbled one is
// its sender's failure (kInternal). Returned as kAborted "rank <r> failed:
// <CodeName>: <message>" keeping the failure's origin, phase and cause; a
// failure without an origin gets its sender's, in `phase`.
Status RoundFailure(const std::vector<std::string>& outcomes, Phase phase);

// Round messages.
std::string EncodeWriting(uint64_t count);
std::string EncodeVote(std::string_view vote_outcome);
std::string EncodeVoted();
std::string EncodeGoOn();
std::string EncodeFinal(std::string_view outcome);
// Root's answer: true and *final untouched for "go on"; false and *final set
// for the final outcome; a malformed answer is kInternal.
Result<bool> DecodeGoOn(std::string_view answer, std::string* final_outcome);

// Root's view of the rounds.
class VoteTally {
 public:
  using Clock = std::chrono::steady_clock;
  VoteTally(int size, Millis timeout, Clock::time_point start);

  // Takes one round's messages (index = rank). A malformed message is its
  // sender's failed vote (kInternal naming it, origin that rank), as a
  // garbled peer is its own failure in AgreeStatus, never root's.
  void Add(const std::vector<std::string>& msgs, Clock::time_point now);
  // Some vote is a failure, or every rank voted: decide now.
  bool Decided() const;
  // The votes so far (an empty string: not voted yet).
  const std::vector<std::string>& votes() const { return votes_; }
  // kTimeout naming the still-writing ranks whose count did not move for a
  // whole deadline by `now`, or OK. `me` is root's rank (the message's "rank <me>:").
  // The stalled ranks are also recorded typed (Status::missing(), hosts from `comm` if given).
  Status Stalled(Clock::time_point now, int me, const Comm* comm = nullptr) const;

 private:
  struct Writer {
    uint64_t count = 0;
    Clock::time_point since;  // when count last moved
  };
  void Garbled(size_t r, std::string_view m);  // records rank r's malformed message as its failed vote

  Millis timeout_;
  std::vector<std::string> votes_;
  std::vector<Writer> writers_;
  bool failed_vote_ = false;
};

}  // namespace ckpt
