// MpiComm: the Comm control plane over MPI point-to-point, with deadlines.
//
// Blocking MPI collectives cannot time out, so a dead or hung rank would hang
// everyone. MpiComm uses nonblocking point-to-point instead: every call takes
// a fresh tag from a per-communicator sequence (all ranks issue the same call
// sequence, so tags agree), probes/receives with MPI_Improbe + MPI_Imrecv
// (sizes need not be known in advance) and sends with MPI_Isend, polling with
// short sleeps until done or the deadline passes. On timeout the Status is
// kTimeout: "rank 0: no answer from rank(s) 3 within 2000 ms in phase 'vote'
// (rank 3 on host 'n2')", with the missing ranks, their hosts and the phase as
// typed fields (Status::missing()). Every rank's host name is gathered once,
// at Create/Split (collective, like the duplicate itself).
// A late message carries an old tag and can never be matched by a later call.
//
// Ownership: MpiComm owns a duplicate of the MPI_Comm it is created from (its
// own matching context, so user traffic cannot collide) and frees it on
// destruction. Sends that did not complete before a timeout cannot be
// cancelled reliably (MPI_Cancel of sends is deprecated since MPI-4.0 and not
// honoured by every implementation); their buffers are kept and reaped on later calls; at
// destruction any still pending are released with MPI_Request_free and their buffers leaked on
// purpose, because MPI may still use them. Receives already matched when the
// deadline passes are kept the same way.
//
// Thread-safety: one MpiComm is used by one thread at a time (Comm contract).
// Several MpiComm objects may be used from different threads concurrently only
// if MPI provides MPI_THREAD_MULTIPLE (MpiSession::thread_level()).
// Create and Split are blocking MPI collectives without a timeout: call them
// at start-up, when all ranks are known to be alive.
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/base/comm.h"

namespace ckpt {

// RAII MPI_Init_thread / MPI_Finalize. Requests MPI_THREAD_MULTIPLE and accepts
// MPI_THREAD_SERIALIZED or better. If MPI is already initialized it adopts it
// and does not finalize. Not copyable; create one per process, on the main thread.
class MpiSession {
 public:
  static Result<std::unique_ptr<MpiSession>> Init(int* argc, char*** argv);
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int thread_level() const { return thread_level_; }
  bool thread_multiple() const { return thread_level_ >= MPI_THREAD_MULTIPLE; }

 private:
  MpiSession(int level, bool owns) : thread_level_(level), owns_(owns) {}
  int thread_level_;
  bool owns_;
};

// Ending a job after a hang. A deadline failure (kTimeout) means a peer may
// be hung or stopped; MPI_Finalize is collective and would then block forever,
// and so would mpirun. Process-wide, thread-safe:
//  - MpiDeadlineFailed: whether any MpiComm call of this process timed out.
//  - SetEndJobOnDeadline(true) (tools that end after a failure: the ckpt CLI):
//    ~MpiSession then skips MPI_Finalize after a deadline failure, and
//  - EndJobIfHung(code), called last (after every MPI object is gone), calls
//    MPI_Abort(MPI_COMM_WORLD, code) if so, after flushing stdio: mpirun kills
//    every rank (a stopped one too) and returns. Otherwise it returns.
//    MPI_Abort may block when the local daemon cannot finish the abort (a
//    node cut off by a partition: OpenMPI waits for its daemon); a watchdog
//    thread then ends this process with `code` after kAbortGrace, so every
//    surviving rank exits within its deadline failure + kAbortGrace. mpirun
//    itself did not end within 60 s of a partition, with or without
//    `--mca oob_tcp_keepalive_time 5 ... intvl 1 ... probes 3` (measured,
//    README "Across hosts"): bound the launcher with a time limit.
// Off by default: a library user may resynchronise after a timeout.
bool MpiDeadlineFailed();
// Records a deadline failure noticed above the comm (a save whose rank made
// no progress, relayed as kTimeout): a peer may be hung, so end the job as
// after an MpiComm timeout.
void NoteDeadlineFailed();
void SetEndJobOnDeadline(bool on);
void EndJobIfHung(int exit_code);
// How long EndJobIfHung lets MPI_Abort work before ending the process itself.
inline constexpr Millis kAbortGrace{3000};

class MpiComm final : public Comm {
 public:
  // Duplicates `base` (collective over it) and sets MPI_ERRORS_RETURN on the copy.
  static Result<std::unique_ptr<MpiComm>> Create(MPI_Comm base = MPI_COMM_WORLD);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Ranks of this communicator on this node (MPI_COMM_TYPE_SHARED), found at Create/Split.
  int local_size() const override { return local_size_; }
  std::string host(int r) const override { return r >= 0 && r < int(hosts_.size()) ? hosts_[size_t(r)] : ""; }

  Result<std::vector<std::string>> Gather(const std::string& mine, int root, Millis timeout,
                                          Phase phase) override;
  Result<std::string> Broadcast(const std::string& msg, int root, Millis timeout,
                                Phase phase) override;
  // Every send posted (MPI_Isend) before any receive is polled, so no rank
  // waits on another's send order (comm_mpi_alltoall.cc).
  Result<std::vector<std::string>> AllToAll(std::vector<std::string> out, Millis timeout,
                                            Phase phase) override;

  // Sub-communicator of the ranks passing the same color (>= 0), ordered by
  // (key, rank). Collective over this communicator, no timeout.
  Result<std::unique_ptr<MpiComm>> Split(int color, int key);

  // The owned communicator, e.g. to pass to MPI-IO; stays owned by this object.
  MPI_Comm raw() const { return comm_; }

 private:
  // A request left behind by a timed-out call, with the buffer MPI may still use.
  struct Pending {
    MPI_Request request;
    std::shared_ptr<std::string> buffer;  // shared by the sends of one call
  };

  MpiComm(MPI_Comm comm, int rank, int size, int tag_limit)
      : comm_(comm), rank_(rank), size_(size), local_size_(NodeSize(comm)), hosts_(GatherHosts(comm)),
        tag_limit_(tag_limit) {}
  static int NodeSize(MPI_Comm comm);  // collective over comm
  // Every rank's host name, index = rank (collective over comm; "" if it fails).
  static std::vector<std::string> GatherHosts(MPI_Comm comm);

  int NextTag();
  Status CheckRoot(int root, Phase phase) const;
  // Posts sends of `msg` to `dsts` and waits for them until `deadline`.
  Status SendAll(const std::string& msg, const std::vector<int>& dsts, int tag,
                 std::chrono::steady_clock::time_point deadline, Millis timeout,
                 Phase phase);
  // Receives one message from each of `srcs` (in any order) until `deadline`.
  Result<std::vector<std::string>> RecvAll(const std::vector<int>& srcs, int tag,
                                           std::chrono::steady_clock::time_point deadline,
                                           Millis timeout, Phase phase);
  // The kTimeout naming `ranks` (typed and in text, with their hosts); also
  // records the deadline failure (MpiDeadlineFailed).
  Status TimeoutStatus(std::string_view what, const std::vector<int>& ranks, Millis timeout,
                       Phase phase) const;
  void Reap();  // drops completed leftovers
  // SetEndJobOnDeadline processes only (the job ends after a deadline
  // failure): ranks a call timed out on are presumed lost and later sends skip
  // them - root's failure broadcast included - and so are the other ranks on
  // a silent rank's host when that is not this rank's host (a node lost: in a
  // vote kill, rank 3 on n2 had answered before n2 died). A send to a dead node's rank
  // makes OpenMPI's TCP transport fail the connect and abort this process
  // inside MPI (PMIx_Abort), which blocked forever in ~1 of 10 node-kill runs
  // before this rank could print what it saw. A library user keeps sending
  // (a late rank may come back) unless a SIGTERM was deferred (launcher_term.h).
  void NoteLost(const std::vector<int>& ranks);
  bool Lost(int r) const { return std::find(lost_.begin(), lost_.end(), r) != lost_.end(); }

  MPI_Comm comm_;
  int rank_;
  int size_;
  int local_size_;
  std::vector<std::string> hosts_;
  int tag_limit_;  // tags used are in [0, tag_limit_)
  uint64_t seq_ = 0;
  std::vector<Pending> pending_;
  std::vector<int> lost_;  // NoteLost
};

// "<what> failed: <MPI error string>" as Status::Internal; OK for MPI_SUCCESS.
Status MpiStatus(int rc, std::string_view what);

}  // namespace ckpt
