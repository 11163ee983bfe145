// Exit on a signal (preemption): Megatron-LM's --exit-signal-handler as
// library code. A handler of the signal (SIGTERM by default, as Slurm and
// Kubernetes send it before SIGKILL) only sets a flag; the training loop asks
// after every step whether ANY rank of the job got it (one AllGather, like
// Megatron-LM's DistributedSignalHandler.signals_received), so all ranks save
// the same iteration and leave the loop together even when only one rank was
// signalled.
//
// One ExitSignal per process and signal; the destructor restores the previous
// handler. The flag is process-wide (a signal handler has no object).
#pragma once

#include <memory>

#include "ckpt/base/comm.h"
#include "ckpt/base/status.h"
#include "ckpt/workload/train_loop.h"

namespace ckpt::workload {

class ExitSignal {
 public:
  // Installs the handler (sigaction, SA_RESTART). kFailedPrecondition if one
  // is installed already; kInternal if sigaction fails.
  static Result<std::unique_ptr<ExitSignal>> Install(int sig);
  ~ExitSignal();
  ExitSignal(const ExitSignal&) = delete;
  ExitSignal& operator=(const ExitSignal&) = delete;

  // This process received the signal since Install.
  bool received() const;
  int signal() const { return sig_; }
  // Collective over `comm`: true on every rank iff some rank received it.
  // The timeout bounds the AllGather (a rank that died shows as an error).
  Result<bool> AnyRankReceived(Comm& comm, Millis timeout) const;

 private:
  explicit ExitSignal(int sig) : sig_(sig) {}
  int sig_;
};

// The training loop's preemption exit: installs the handler of `sig` and sets
// opts->stop_requested to AnyRankReceived over `comm` (collective). The
// returned object must outlive the loop. Errors as Install.
Result<std::unique_ptr<ExitSignal>> StopLoopOnSignal(int sig, Comm& comm, Millis timeout, TrainLoopOptions* opts);

}  // namespace ckpt::workload
