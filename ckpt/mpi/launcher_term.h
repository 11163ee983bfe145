// Outliving the launcher's SIGTERM long enough to name a lost node - and
// only that long.
//
// When a whole node dies, OpenMPI 4.1's mpirun ends the job itself: the
// lost daemon's TCP connection closes, its error manager aborts the job
// (--enable-recovery or not) and every surviving rank's daemon sends it
// SIGTERM, then SIGKILL odls_base_sigkill_timeout seconds later (default 1).
// Measured on the namespace cluster (tests/cluster/test_node_loss.py): the
// SIGTERM came 1.5-1.9 s after the node kill in 2 of 4 commit-phase runs and
// 1 of 6 write-phase runs (in the others the abort message never reached the
// survivors' daemon), before the survivors' own deadline (3 s) could name the
// lost ranks and host: they died silently, exit 143 or nothing at all.
//
// A SIGTERM is deferred only while a save or load is under way: a
// TermDeferral is alive (the CLI holds one around each save, load and
// reshard), or an MpiComm wait of a save/load phase (DefersTermination) or of
// its report is in flight. The operation then goes on: every wait has its
// deadline, so it ends by itself - a lost peer named with its host, the save
// committed or not. Once nothing defers it any more, the process has
// kTermTail to end by itself (print its report, exit with its own code:
// EndJobIfHung then exits at once, without MPI_Abort or MPI_Finalize - the
// launcher is already ending the job, and a lost node would make either
// block), then it exits 143 (128 + SIGTERM). In any case it exits 143
// TermGrace() after the signal, printing the phase, ranks and hosts of the
// last wait. Outside a save/load SIGTERM takes its default action at once
// (`ckpt train` between saves dies as without ckpt) - or the program's own
// handler (ExitSignal: `ckpt train --exit-signal-handler`) is called, always,
// as without the deferral.
// mpirun must wait TermGrace() before SIGKILL: pass
// `--mca odls_base_sigkill_timeout S` with S >= TermGrace() in seconds
// (README "Across hosts"; scripts/cluster.py's mpirun line passes 30).
//
// Two ways to take the signal (both start a watcher thread that decides):
//  - DeferLauncherTermination (the ckpt CLI, first thing in main, before any
//    thread exists: the mask is inherited by every thread MPI starts) blocks
//    SIGTERM in the process and takes it with sigwait.
//  - DeferTerminationInWaits (the Python binding, when a ckpt.MpiComm is
//    made) installs a handler for SIGTERM only while something defers it and
//    only where its action is the default: a Python handler (signal.signal)
//    already waits for the C++ call to return, and outside a save/load the
//    process keeps its own SIGTERM. After the operation, the binding calls
//    EndAfterLauncherTerm once it has printed the outcome.
// Thread-safe. Without either call nothing changes (a library user keeps
// the default SIGTERM action).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/base/comm.h"

namespace ckpt {

// Blocks SIGTERM in the calling thread (and so in every thread created after)
// and starts the watcher. Call once, before any other thread starts.
void DeferLauncherTermination();

// Handler mode (see above); idempotent. Does nothing after DeferLauncherTermination.
void DeferTerminationInWaits();

// Gives the calling thread SIGTERM as it was before DeferLauncherTermination
// (a blocked signal stays blocked across exec). Runs in every forked child
// (pthread_atfork); call it before an exec without fork. Async-signal-safe.
void RestoreSignalMaskForExec();

// Whether a SIGTERM was taken and deferred (the process is ending).
bool LauncherTerminating();

// How long the process may go on after SIGTERM: 2 x the longest deadline of
// any MpiComm wait so far + 1 s (a vote or a decision wait, then the report
// gather), at least 1 s.
Millis TermGrace();

// After a deferred SIGTERM, how long the process may go on once nothing
// defers it any more (printing the outcome and exiting by itself).
inline constexpr Millis kTermTail{1000};

// Ends the process after a deferred SIGTERM: prints `outcome` (if any) and
// takes SIGTERM's default action (exit status 143 to a shell). Returns at
// once when no SIGTERM was deferred.
void EndAfterLauncherTerm(std::string_view outcome);

// Whether a wait in `phase` belongs to a save or load (or reports one):
// such a wait defers SIGTERM. Training collectives (dp_sum, tp_sum, ...) do not.
bool DefersTermination(Phase phase);

// A save, load or reshard under way: SIGTERM waits for it (nestable).
class TermDeferral {
 public:
  TermDeferral();
  ~TermDeferral();
  TermDeferral(const TermDeferral&) = delete;
  TermDeferral& operator=(const TermDeferral&) = delete;
};

// fn(args...) under a TermDeferral.
template <typename Fn, typename... Args>
auto TermDeferred(Fn&& fn, Args&&... args) {
  const TermDeferral deferral;
  return fn(std::forward<Args>(args)...);
}

// One MpiComm wait in flight, from NoteWait to its destruction: the waiting
// rank, the phase, the ranks (and their hosts) waited on and the deadline
// (the watcher's message; TermGrace). Defers SIGTERM if DefersTermination(phase).
class WaitNote {
 public:
  WaitNote(int rank, Phase phase, const std::vector<int>& ranks, const std::vector<std::string>& hosts, Millis timeout);
  ~WaitNote();
  WaitNote(const WaitNote&) = delete;
  WaitNote& operator=(const WaitNote&) = delete;

 private:
  bool defers_;
};

}  // namespace ckpt
