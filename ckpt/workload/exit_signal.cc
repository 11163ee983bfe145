#include "ckpt/workload/exit_signal.h"

#include <atomic>
#include <csignal>
#include <cstring>
#include <string>

namespace ckpt::workload {
namespace {

volatile std::sig_atomic_t g_received = 0;
std::atomic<bool> g_installed{false};
struct sigaction g_previous;

extern "C" void OnExitSignal(int) { g_received = 1; }

}  // namespace

Result<std::unique_ptr<ExitSignal>> ExitSignal::Install(int sig) {
  bool expected = false;
  if (!g_installed.compare_exchange_strong(expected, true))
    return Status::FailedPrecondition("an exit-signal handler is installed already in this process");
  g_received = 0;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = OnExitSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (sigaction(sig, &sa, &g_previous) != 0) {
    g_installed = false;
    return Status::Internal("sigaction(" + std::to_string(sig) + "): " + std::strerror(errno));
  }
  return std::unique_ptr<ExitSignal>(new ExitSignal(sig));
}

ExitSignal::~ExitSignal() {
  sigaction(sig_, &g_previous, nullptr);
  g_installed = false;
}

bool ExitSignal::received() const { return g_received != 0; }

Result<bool> ExitSignal::AnyRankReceived(Comm& comm, Millis timeout) const {
  CKPT_ASSIGN_OR_RETURN(auto all, comm.AllGather(received() ? "1" : "0", timeout, Phase::kExitSignal));
  for (const auto& s : all)
    if (s == "1") return true;
  return false;
}

Result<std::unique_ptr<ExitSignal>> StopLoopOnSignal(int sig, Comm& comm, Millis timeout, TrainLoopOptions* opts) {
  CKPT_ASSIGN_OR_RETURN(auto handler, ExitSignal::Install(sig));
  const ExitSignal* h = handler.get();
  opts->stop_requested = [h, &comm, timeout] { return h->AnyRankReceived(comm, timeout); };
  return handler;
}

}  // namespace ckpt::workload
