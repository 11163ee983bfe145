// The SIGTERM watcher (launcher_term.h).
#include "ckpt/mpi/launcher_term.h"

#include <pthread.h>
#include <semaphore.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;

enum class Mode { kNone, kBlocked, kHandler };
std::atomic<Mode> g_mode{Mode::kNone};
std::atomic<bool> g_terminating{false};
sigset_t g_before;  // the mask before DeferLauncherTermination: what children get back
std::atomic<int64_t> g_longest_ms{0};
sem_t g_signalled;  // handler mode: posted by the handler (async-signal-safe), taken by the watcher

struct State {
  std::mutex mu;
  int deferring = 0;       // live TermDeferrals + in-flight save/load waits
  bool installed = false;  // handler mode: our handler is SIGTERM's action now
  int rank = -1;
  std::string phase, ranks;
};

State& S() {
  static State* s = new State;  // never destroyed: the watcher may read it during exit
  return *s;
}

bool Deferring() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.deferring > 0;
}

std::string Describe() {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.rank < 0) return "rank ?: no collective started";
  return "rank " + std::to_string(s.rank) + ": last wait in phase '" + s.phase + "' for rank(s) " + s.ranks;
}

void OnSignal(int) { sem_post(&g_signalled); }

// Handler mode: our handler while something defers SIGTERM, where its action
// is the default (a program's own handler stays: it runs after the call).
// Called with S().mu held, on the 0 <-> 1 transitions of `deferring`.
void Install(State& s, bool on) {
  if (g_mode != Mode::kHandler || g_terminating) return;
  struct sigaction cur;
  if (on) {
    if (sigaction(SIGTERM, nullptr, &cur) != 0 || (cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) return;
    struct sigaction sa {};
    sa.sa_handler = OnSignal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    s.installed = sigaction(SIGTERM, &sa, nullptr) == 0;
  } else if (s.installed) {
    // Back to the default - unless the program installed its own handler meanwhile (Python's
    // signal.signal in the main thread while an async save's wait was in flight).
    if (sigaction(SIGTERM, nullptr, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == OnSignal)
      signal(SIGTERM, SIG_DFL);
    s.installed = false;
  }
}

void Defer(int delta) {
  State& s = S();
  std::lock_guard<std::mutex> lock(s.mu);
  s.deferring += delta;
  if (delta > 0 && s.deferring == 1) Install(s, true);
  if (delta < 0 && s.deferring == 0) Install(s, false);
}

// SIGTERM's default action, now: the process ends as if never deferred.
[[noreturn]] void DefaultAction() {
  signal(SIGTERM, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  raise(SIGTERM);  // delivered to this thread, which no longer blocks it
  std::_Exit(128 + SIGTERM);
}

// The handler the program itself installed for SIGTERM (e.g. ExitSignal,
// `ckpt train --exit-signal-handler`: save, then leave the loop), or nullptr
// for the default action. The mask keeps SIGTERM from reaching it directly.
void (*ProgramHandler())(int) {
  if (g_mode != Mode::kBlocked) return nullptr;  // handler mode: ours is installed only over SIG_DFL
  struct sigaction cur;
  if (sigaction(SIGTERM, nullptr, &cur) != 0 || (cur.sa_flags & SA_SIGINFO)) return nullptr;
  return cur.sa_handler == SIG_DFL || cur.sa_handler == SIG_IGN ? nullptr : cur.sa_handler;
}

// One SIGTERM: the program's handler, the default action, or - a save/load
// under way - wait for it to end by its deadlines (bounded), then exit 143.
void OnTerm() {
  if (void (*handler)(int) = ProgramHandler()) return handler(SIGTERM);  // the program decides, as without us
  if (g_terminating) return;                                             // a second SIGTERM while the first is deferred
  if (!Deferring()) DefaultAction();
  g_terminating = true;
  const Millis grace = TermGrace();
  std::fprintf(stderr,
               "ckpt: %s: SIGTERM from the launcher (a node may be lost) during a save/load; it may take up to "
               "%lld ms more to end by its deadlines\n",
               Describe().c_str(), static_cast<long long>(grace.count()));
  std::fflush(stderr);
  const auto end = Clock::now() + grace;
  auto idle_since = Clock::time_point::max();
  while (Clock::now() < end) {
    if (Deferring()) {
      idle_since = Clock::time_point::max();
    } else if (idle_since == Clock::time_point::max()) {
      idle_since = Clock::now();
    } else if (Clock::now() - idle_since >= kTermTail) {
      std::fprintf(stderr, "ckpt: %s: the save/load ended after SIGTERM; exiting with code 143\n", Describe().c_str());
      std::fflush(stderr);
      std::_Exit(128 + SIGTERM);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::fprintf(stderr, "ckpt: %s: did not end within %lld ms of SIGTERM; exiting with code 143\n", Describe().c_str(),
               static_cast<long long>(grace.count()));
  std::fflush(stderr);
  std::_Exit(128 + SIGTERM);
}

void WatchBlocked(sigset_t set) {
  for (int sig = 0;;) {
    if (sigwait(&set, &sig) != 0) return;
    OnTerm();
  }
}

void WatchHandler() {
  for (;;) {
    if (sem_wait(&g_signalled) == 0) OnTerm();
  }
}

}  // namespace

void DeferLauncherTermination() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (g_mode != Mode::kNone) return;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    if (pthread_sigmask(SIG_BLOCK, &set, &g_before) != 0) return;  // keeps the default action
    g_mode = Mode::kBlocked;
    // A blocked signal stays blocked across fork and exec: a child (mpirun
    // started by `ckpt faults`) must keep its default SIGTERM.
    pthread_atfork(nullptr, nullptr, [] { RestoreSignalMaskForExec(); });
    std::thread(WatchBlocked, set).detach();
  });
}

void DeferTerminationInWaits() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (g_mode != Mode::kNone || sem_init(&g_signalled, 0, 0) != 0) return;
    std::thread(WatchHandler).detach();
    g_mode = Mode::kHandler;
  });
}

void RestoreSignalMaskForExec() {
  if (g_mode == Mode::kBlocked && !sigismember(&g_before, SIGTERM)) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  }
}

bool LauncherTerminating() { return g_terminating; }

Millis TermGrace() { return std::max(Millis(1000), Millis(2 * g_longest_ms.load() + 1000)); }

void EndAfterLauncherTerm(std::string_view outcome) {
  if (!g_terminating) return;
  if (!outcome.empty()) std::fprintf(stderr, "ckpt: %.*s\n", static_cast<int>(outcome.size()), outcome.data());
  std::fprintf(stderr, "ckpt: the save/load ended after a deferred SIGTERM from the launcher; exiting\n");
  std::fflush(stdout);
  std::fflush(stderr);
  DefaultAction();
}

bool DefersTermination(Phase phase) {
  switch (phase) {
    case Phase::kValidate:
    case Phase::kBegin:
    case Phase::kPlan:
    case Phase::kWrite:
    case Phase::kVote:
    case Phase::kCommit:
    case Phase::kNonFiniteGuard:
    case Phase::kLoad:
    case Phase::kLoadShare:
    case Phase::kStrict:
    case Phase::kLocalWrite:
    case Phase::kLocalReplicate:
    case Phase::kLocalReceive:
    case Phase::kLocalCommit:
    case Phase::kLocalMarker:
    case Phase::kLocalMarked:
    case Phase::kLocalRestore:
    case Phase::kTierCleanup:
    case Phase::kTierGather:
    case Phase::kRestoreHoldings:
    case Phase::kRestoreFetch:
    case Phase::kResumeManifest:
    case Phase::kResumeCheck:
    case Phase::kResumeApply:
    case Phase::kReport: return true;
    default: return false;
  }
}

TermDeferral::TermDeferral() { Defer(+1); }
TermDeferral::~TermDeferral() { Defer(-1); }

WaitNote::WaitNote(int rank, Phase phase, const std::vector<int>& ranks, const std::vector<std::string>& hosts,
                   Millis timeout)
    : defers_(DefersTermination(phase)) {
  int64_t ms = timeout.count(), cur = g_longest_ms.load();
  while (ms > cur && !g_longest_ms.compare_exchange_weak(cur, ms)) {
  }
  std::string list;
  for (size_t i = 0; i < ranks.size(); ++i) {
    list += (list.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (i < hosts.size() && !hosts[i].empty()) list += " on host '" + hosts[i] + "'";
  }
  State& s = S();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.rank = rank;
    s.phase = std::string(PhaseName(phase));
    s.ranks = std::move(list);
  }
  if (defers_) Defer(+1);
}

WaitNote::~WaitNote() {
  if (defers_) Defer(-1);
}

}  // namespace ckpt
