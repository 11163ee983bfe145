// Outliving the launcher's SIGTERM long enough to name a lost node.
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
// DeferLauncherTermination() (the ckpt CLI, first thing in main, before any
// thread exists: the signal mask is inherited by every thread MPI starts)
// blocks SIGTERM in the process and takes it on a watcher thread (sigwait),
// which only notes it. The command in flight goes on: every wait has its
// deadline, so it ends by itself - a lost peer named with its host, the
// save committed or not - and exits with its own code (EndJobIfHung then
// exits at once, without MPI_Abort or MPI_Finalize: the launcher is already
// ending the job, and a lost node would make either block). If it has not
// ended TermGrace() after the signal, the watcher prints the phase and the
// ranks of the last wait and exits 143 (128 + SIGTERM).
// mpirun must then wait that long before SIGKILL: pass
// `--mca odls_base_sigkill_timeout S` with S >= TermGrace() in seconds
// (README "Across hosts"; scripts/cluster.py's mpirun line passes 30).
// A SIGTERM handler the program installed itself (ExitSignal: `ckpt train
// --exit-signal-handler`, a preemption that saves and leaves the loop) is
// called by the watcher instead: the program decides, as without the watcher.
//
// Thread-safe. Without DeferLauncherTermination nothing changes (a library
// user keeps the default SIGTERM action).
#pragma once

#include <string_view>
#include <vector>

#include "ckpt/base/comm.h"

namespace ckpt {

// Blocks SIGTERM in the calling thread (and so in every thread created after)
// and starts the watcher. Call once, before any other thread starts.
void DeferLauncherTermination();

// Gives the calling thread SIGTERM as it was before DeferLauncherTermination
// (a blocked signal stays blocked across exec). Runs in every forked child
// (pthread_atfork); call it before an exec without fork. Async-signal-safe.
void RestoreSignalMaskForExec();

// Whether a SIGTERM was taken by the watcher.
bool LauncherTerminating();

// How long the command may go on after SIGTERM: 2 x the longest deadline of
// any MpiComm wait so far + 1 s (a vote or a decision wait, then the report
// gather), at least 1 s.
Millis TermGrace();

// Recorded by MpiComm at the start of every wait: the waiting rank, the
// phase, the ranks waited on and the deadline (the watcher's message; TermGrace).
void NoteWait(int rank, Phase phase, const std::vector<int>& ranks, Millis timeout);

}  // namespace ckpt
