// Comm: the control-plane collectives the checkpoint protocol needs.
//
// Every call carries a deadline and a phase (Phase, phase.h). A rank that does not answer
// in time turns into Status::Timeout naming the missing rank(s) and the phase,
// so a hung or dead rank never makes the others wait forever.
//
// Implementations: LocalComm (one rank), ThreadComm (threads as ranks, for
// unit tests), MpiComm (comm_mpi.h, OpenMPI point-to-point with polling).
// A Comm object is used by one thread (its rank) at a time; all ranks must
// issue the same sequence of calls.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/base/phase.h"
#include "ckpt/base/status.h"

namespace ckpt {

using Millis = std::chrono::milliseconds;

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // How many ranks of this communicator run on this rank's node (including
  // it; threads of one process count as one node): worker-thread defaults
  // divide the node's cores by it (DefaultWorkerThreads).
  virtual int local_size() const { return 1; }
  // The host rank `r` runs on, learnt once when the communicator was made
  // ("" where unknown). A deadline failure names its missing peers with it
  // (Status::missing()): a lost node is named by host, not only by rank.
  virtual std::string host(int r) const { return (void)r, std::string(); }

  // Root receives every rank's message (index = rank); others get an empty vector.
  virtual Result<std::vector<std::string>> Gather(const std::string& mine, int root, Millis timeout,
                                                  Phase phase) = 0;
  // Every rank returns root's message.
  virtual Result<std::string> Broadcast(const std::string& msg, int root, Millis timeout,
                                        Phase phase) = 0;

  // Personalised exchange: sends out[d] to rank d (out.size() == size();
  // out[rank()] comes back as is) and returns what every rank sent to this
  // one, index = source. Point-to-point, no root: the data plane of shared
  // load reads (load_share.h). Every message may be empty.
  virtual Result<std::vector<std::string>> AllToAll(std::vector<std::string> out, Millis timeout,
                                                    Phase phase) = 0;

  // Gather to `root`, which then broadcasts decide(messages) (phase
  // `decide_phase`); every rank returns root's decision. If root's gather
  // fails (a rank late or dead: Timeout naming it and `gather_phase`), root
  // broadcasts that failure before returning it, and every other rank
  // returns it too, same code, as "rank <me>: aborted by rank <root>: <root's
  // message>", so all survivors name the missing rank and the phase. Non-root
  // ranks wait for the decision up to DecisionTimeout(timeout): root may
  // first wait a full timeout on a late rank. If root itself is gone they
  // time out naming root. Root waits at most kErrorSendGrace for the failure
  // to be taken (a dead rank never takes it).
  using Decide = std::function<std::string(std::vector<std::string> messages)>;
  Result<std::string> GatherDecide(const std::string& mine, int root, Millis timeout,
                                   Phase gather_phase, Phase decide_phase,
                                   const Decide& decide);

  // GatherDecide on rank 0 with the concatenation as the decision: every rank
  // gets all messages (index = rank), or every survivor the same failure.
  Result<std::vector<std::string>> AllGather(const std::string& mine, Millis timeout,
                                             Phase phase);
  Status Barrier(Millis timeout, Phase phase);
};

// How long a non-root rank waits for root's decision after a gather:
// timeout * 5 / 4. Root waits up to `timeout` from its own start of the
// gather, which may be later than ours: a start up to timeout / 4 later
// still gets the missing rank named; a dead root is noticed after 1.25 x.
inline Millis DecisionTimeout(Millis timeout) { return timeout + timeout / 4; }
// How long root waits for a failure it broadcasts to be taken.
inline constexpr Millis kErrorSendGrace{200};

class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  Result<std::vector<std::string>> Gather(const std::string& mine, int, Millis,
                                          Phase) override {
    return std::vector<std::string>{mine};
  }
  Result<std::string> Broadcast(const std::string& msg, int, Millis, Phase) override {
    return msg;
  }
  Result<std::vector<std::string>> AllToAll(std::vector<std::string> out, Millis, Phase phase) override;
};

// "Pick the worker count for me": DefaultWorkerThreads of the operation's Comm.
inline constexpr int kAutoThreads = -1;

// The one default number of worker threads of a rank (load reads, save
// encoding): the node's hardware threads divided by the ranks sharing the
// node, comm->local_size() (nullptr: one rank); at least 1.
int DefaultWorkerThreads(const Comm* comm);

// Creates `n` connected ThreadComm endpoints; endpoint i is rank i and must be
// used by one thread. The group lives as long as any endpoint.
std::vector<std::unique_ptr<Comm>> MakeThreadComms(int n);

// This machine's host name (gethostname; "" if it fails).
std::string ThisHostName();

// Encodes a list of strings into one (length-prefixed) and back.
std::string PackStrings(const std::vector<std::string>& parts);
Result<std::vector<std::string>> UnpackStrings(std::string_view packed);

}  // namespace ckpt
