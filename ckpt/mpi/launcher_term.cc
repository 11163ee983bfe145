// The SIGTERM watcher (launcher_term.h).
#include "ckpt/mpi/launcher_term.h"

#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace ckpt {
namespace {

std::atomic<bool> g_terminating{false};
sigset_t g_before;  // the mask before DeferLauncherTermination: what children get back
std::atomic<int64_t> g_longest_ms{0};

struct LastWait {
  std::mutex mu;
  int rank = -1;
  std::string phase, ranks;
};

LastWait& Last() {
  static LastWait* w = new LastWait;  // never destroyed: the watcher may read it during exit
  return *w;
}

std::string Describe() {
  LastWait& w = Last();
  std::lock_guard<std::mutex> lock(w.mu);
  if (w.rank < 0) return "rank ?: no collective started";
  return "rank " + std::to_string(w.rank) + ": last wait in phase '" + w.phase + "' for rank(s) " + w.ranks;
}

// The handler the program itself installed for SIGTERM (e.g. ExitSignal,
// `ckpt train --exit-signal-handler`: save, then leave the loop), or nullptr
// for the default action. The mask keeps SIGTERM from reaching it directly.
void (*ProgramHandler())(int) {
  struct sigaction cur;
  if (sigaction(SIGTERM, nullptr, &cur) != 0 || (cur.sa_flags & SA_SIGINFO)) return nullptr;
  return cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN ? nullptr : cur.sa_handler;
}

void Watch(sigset_t set) {
  int sig = 0;
  for (;;) {
    if (sigwait(&set, &sig) != 0) return;
    void (*handler)(int) = ProgramHandler();
    if (!handler) break;
    handler(SIGTERM);  // the program decides (its flag), as without the watcher
  }
  g_terminating = true;
  const Millis grace = TermGrace();
  std::fprintf(stderr,
               "ckpt: %s: SIGTERM from the launcher (a node may be lost); the operation in flight may "
               "take up to %lld ms more to end by its deadlines\n",
               Describe().c_str(), static_cast<long long>(grace.count()));
  std::fflush(stderr);
  std::this_thread::sleep_for(grace);
  std::fprintf(stderr, "ckpt: %s: did not end within %lld ms of SIGTERM; exiting with code 143\n", Describe().c_str(),
               static_cast<long long>(grace.count()));
  std::fflush(stderr);
  std::_Exit(128 + SIGTERM);
}

}  // namespace

void DeferLauncherTermination() {
  static std::once_flag once;
  std::call_once(once, [] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    if (pthread_sigmask(SIG_BLOCK, &set, &g_before) != 0) return;  // keeps the default action
    // A blocked signal stays blocked across fork and exec: a child (mpirun
    // started by `ckpt faults`) must keep its default SIGTERM.
    pthread_atfork(nullptr, nullptr, [] { RestoreSignalMaskForExec(); });
    std::thread(Watch, set).detach();
  });
}

void RestoreSignalMaskForExec() {
  if (!sigismember(&g_before, SIGTERM)) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
}

bool LauncherTerminating() { return g_terminating; }

Millis TermGrace() { return std::max(Millis(1000), Millis(2 * g_longest_ms.load() + 1000)); }

void NoteWait(int rank, Phase phase, const std::vector<int>& ranks, Millis timeout) {
  int64_t ms = timeout.count(), cur = g_longest_ms.load();
  while (ms > cur && !g_longest_ms.compare_exchange_weak(cur, ms)) {
  }
  std::string list;
  for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
  LastWait& w = Last();
  std::lock_guard<std::mutex> lock(w.mu);
  w.rank = rank;
  w.phase = std::string(PhaseName(phase));
  w.ranks = std::move(list);
}

}  // namespace ckpt
