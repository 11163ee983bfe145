// MpiComm: Gather/Broadcast as polled nonblocking point-to-point with deadlines.
#include "ckpt/mpi/comm_mpi.h"

#include <mutex>

#include "ckpt/base/clock.h"
#include "ckpt/mpi/arrival_lags.h"
#include "ckpt/mpi/launcher_term.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <climits>
#include <cstdlib>
#include <thread>

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;

std::atomic<bool> g_deadline_failed{false};
std::atomic<bool> g_end_job_on_deadline{false};

bool MpiFinalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

// Sleeps between polls: short at first (answers usually come fast), backing
// off so oversubscribed ranks leave the cores to the ranks doing real work.
class Backoff {
 public:
  void Wait() {
    std::this_thread::sleep_for(std::chrono::microseconds(us_));
    us_ = std::min(us_ * 2, 1000);
  }

 private:
  int us_ = 20;
};

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

std::vector<std::string> HostsOf(const Comm& comm, const std::vector<int>& ranks) {
  std::vector<std::string> hosts;
  for (int r : ranks) hosts.push_back(comm.host(r));
  return hosts;
}

std::vector<int> AllBut(int size, int skip) {
  std::vector<int> v;
  for (int r = 0; r < size; ++r)
    if (r != skip) v.push_back(r);
  return v;
}

}  // namespace

Status MpiStatus(int rc, std::string_view what) {
  if (rc == MPI_SUCCESS) return Status::Ok();
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  return Status::Internal(std::string(what) + " failed: " + std::string(text, size_t(len)));
}

// ---- MpiSession ----

Result<std::unique_ptr<MpiSession>> MpiSession::Init(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (initialized) {
    CKPT_RETURN_IF_ERROR(MpiStatus(MPI_Query_thread(&provided), "MPI_Query_thread"));
    return std::unique_ptr<MpiSession>(new MpiSession(provided, /*owns=*/false));
  }
  CKPT_RETURN_IF_ERROR(
      MpiStatus(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread"));
  auto session = std::unique_ptr<MpiSession>(new MpiSession(provided, /*owns=*/true));
  if (provided < MPI_THREAD_SERIALIZED)
    return Status::FailedPrecondition("MPI provides thread level " + std::to_string(provided) +
                                      "; ckpt needs MPI_THREAD_SERIALIZED or better");
  return session;
}

MpiSession::~MpiSession() {
  if (g_end_job_on_deadline && g_deadline_failed) return;  // EndJobIfHung aborts instead
  if (LauncherTerminating()) return;  // the launcher ends the job; a lost node would block the finalize
  if (owns_ && !MpiFinalized()) MPI_Finalize();
}

bool MpiDeadlineFailed() { return g_deadline_failed; }
void NoteDeadlineFailed() { g_deadline_failed = true; }
void SetEndJobOnDeadline(bool on) { g_end_job_on_deadline = on; }

void EndJobIfHung(int exit_code) {
  if (LauncherTerminating()) {  // the launcher is ending the job already (launcher_term.h)
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(exit_code);
  }
  if (!g_end_job_on_deadline || !g_deadline_failed) return;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || MpiFinalized()) return;
  std::fflush(stdout);
  std::fflush(stderr);
  // MPI_Abort asks the local daemon to end the job and may never return when
  // the daemon cannot finish that (a node cut off: it waits for the
  // unreachable one). This process ends anyway, kAbortGrace later.
  std::thread([exit_code] {
    std::this_thread::sleep_for(kAbortGrace);
    std::fprintf(stderr, "ckpt: MPI_Abort did not end this process within %lld ms (a node may be unreachable); "
                 "exiting with code %d\n", static_cast<long long>(kAbortGrace.count()), exit_code);
    std::fflush(stderr);
    std::_Exit(exit_code);
  }).detach();
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort returned (it should not)
}

// ---- MpiComm ----

Result<std::unique_ptr<MpiComm>> MpiComm::Create(MPI_Comm base) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized || MpiFinalized())
    return Status::FailedPrecondition("MpiComm::Create: MPI is not initialized (use MpiSession)");
  MPI_Comm dup = MPI_COMM_NULL;
  CKPT_RETURN_IF_ERROR(MpiStatus(MPI_Comm_dup(base, &dup), "MPI_Comm_dup"));
  CKPT_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  int rank = 0, size = 0, flag = 0;
  int* tag_ub = nullptr;
  MPI_Comm_rank(dup, &rank);
  MPI_Comm_size(dup, &size);
  MPI_Comm_get_attr(dup, MPI_TAG_UB, &tag_ub, &flag);
  // MPI guarantees MPI_TAG_UB >= 32767.
  int tag_limit = (flag && tag_ub) ? *tag_ub : 32767;
  return std::unique_ptr<MpiComm>(new MpiComm(dup, rank, size, tag_limit));
}

MpiComm::~MpiComm() {
  if (MpiFinalized()) return;
  Reap();
  for (Pending& p : pending_) {
    MPI_Request_free(&p.request);
    // Leaked on purpose: MPI may still read or write the buffer.
    static_cast<void>(new std::shared_ptr<std::string>(std::move(p.buffer)));
  }
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

Result<std::unique_ptr<MpiComm>> MpiComm::Split(int color, int key) {
  if (color < 0)
    return Status::InvalidArgument("MpiComm::Split: color must be >= 0, got " +
                                   std::to_string(color));
  MPI_Comm sub = MPI_COMM_NULL;
  CKPT_RETURN_IF_ERROR(MpiStatus(MPI_Comm_split(comm_, color, key, &sub), "MPI_Comm_split"));
  CKPT_RETURN_IF_ERROR(
      MpiStatus(MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler"));
  int rank = 0, size = 0;
  MPI_Comm_rank(sub, &rank);
  MPI_Comm_size(sub, &size);
  return std::unique_ptr<MpiComm>(new MpiComm(sub, rank, size, tag_limit_));
}

int MpiComm::NodeSize(MPI_Comm comm) {
  MPI_Comm node = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS ||
      node == MPI_COMM_NULL)
    return 1;
  int n = 1;
  MPI_Comm_size(node, &n);
  MPI_Comm_free(&node);
  return std::max(1, n);
}

int MpiComm::NextTag() { return int(seq_++ % uint64_t(tag_limit_)); }

Status MpiComm::CheckRoot(int root, Phase phase) const {
  if (root >= 0 && root < size_) return Status::Ok();
  return Status::InvalidArgument("rank " + std::to_string(rank_) + ": root " +
                                 std::to_string(root) + " outside communicator of " +
                                 std::to_string(size_) + " in phase '" + std::string(PhaseName(phase)) + "'");
}

Status MpiComm::TimeoutStatus(std::string_view what, const std::vector<int>& ranks, Millis timeout,
                              Phase phase) const {
  g_deadline_failed = true;  // called exactly when a call fails by its deadline
  MissingPeers peers{ranks, {}, phase};
  for (int r : ranks) peers.hosts.push_back(host(r));
  return Status::Timeout("rank " + std::to_string(rank_) + ": " + std::string(what) + " rank(s) " + RankList(ranks) +
                         " within " + std::to_string(timeout.count()) + " ms in phase '" + std::string(PhaseName(phase)) +
                         "' (" + peers.Describe() + ")")
      .WithMissing(std::move(peers));
}

std::vector<std::string> MpiComm::GatherHosts(MPI_Comm comm) {
  constexpr int kLen = 256;  // HOST_NAME_MAX + 1 on Linux
  int size = 1;
  MPI_Comm_size(comm, &size);
  std::string mine = ThisHostName();
  mine.resize(kLen, '\0');
  mine.back() = '\0';
  std::string all(size_t(size) * kLen, '\0');
  std::vector<std::string> hosts(static_cast<size_t>(size));
  if (MPI_Allgather(mine.data(), kLen, MPI_CHAR, all.data(), kLen, MPI_CHAR, comm) != MPI_SUCCESS)
    return hosts;  // unknown: messages then name ranks only
  for (int r = 0; r < size; ++r) hosts[size_t(r)] = all.c_str() + size_t(r) * kLen;
  return hosts;
}

void MpiComm::NoteLost(const std::vector<int>& ranks) {
  // After a deferred SIGTERM (launcher_term.h) the process is ending too: a
  // Python survivor sending its outcome to a dead node's ranks hung in MPI
  // until the grace ran out, and its peers then named it instead (cluster_gpt_sigterm).
  if (!g_end_job_on_deadline && !LauncherTerminating()) return;
  const std::string& me = hosts_.empty() ? std::string() : hosts_[size_t(rank_)];
  for (int r : ranks) {
    if (!Lost(r)) lost_.push_back(r);
    // A rank silent on another host: that host is presumed lost, with every rank on it (the
    // dead node's rank that did answer before it died is no safer to send to).
    const std::string h = host(r);
    if (h.empty() || h == me) continue;
    for (int o = 0; o < size_; ++o)
      if (o != rank_ && host(o) == h && !Lost(o)) lost_.push_back(o);
  }
}

void MpiComm::Reap() {
  std::erase_if(pending_, [](Pending& p) {
    int done = 0;
    MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
}

Result<std::vector<std::string>> MpiComm::Gather(const std::string& mine, int root, Millis timeout,
                                                 Phase phase) {
  CKPT_RETURN_IF_ERROR(CheckRoot(root, phase));
  Reap();
  int tag = NextTag();
  auto deadline = Clock::now() + timeout;
  if (rank_ != root) {
    CKPT_RETURN_IF_ERROR(SendAll(mine, {root}, tag, deadline, timeout, phase));
    return std::vector<std::string>{};
  }
  std::vector<int> srcs = AllBut(size_, root);
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> got, RecvAll(srcs, tag, deadline, timeout, phase));
  std::vector<std::string> out(size_);
  out[root] = mine;
  for (size_t i = 0; i < srcs.size(); ++i) out[srcs[i]] = std::move(got[i]);
  return out;
}

Result<std::string> MpiComm::Broadcast(const std::string& msg, int root, Millis timeout,
                                       Phase phase) {
  CKPT_RETURN_IF_ERROR(CheckRoot(root, phase));
  Reap();
  int tag = NextTag();
  auto deadline = Clock::now() + timeout;
  if (rank_ == root) {
    CKPT_RETURN_IF_ERROR(SendAll(msg, AllBut(size_, root), tag, deadline, timeout, phase));
    return msg;
  }
  CKPT_ASSIGN_OR_RETURN(std::vector<std::string> got,
                        RecvAll({root}, tag, deadline, timeout, phase));
  return std::move(got.front());
}

Status MpiComm::SendAll(const std::string& msg, const std::vector<int>& dsts, int tag,
                        Clock::time_point deadline, Millis timeout, Phase phase) {
  if (msg.size() > size_t(INT_MAX))
    return Status::InvalidArgument("rank " + std::to_string(rank_) + ": message of " +
                                   std::to_string(msg.size()) + " bytes is too large in phase '" +
                                   std::string(PhaseName(phase)) + "'");
  const WaitNote note(rank_, phase, dsts, HostsOf(*this, dsts), timeout);  // SIGTERM waits for a save/load's wait
  // One shared copy: it must outlive the requests even if we return early.
  auto buffer = std::make_shared<std::string>(msg);
  std::vector<MPI_Request> reqs(dsts.size(), MPI_REQUEST_NULL);
  std::vector<int> skipped;  // presumed lost (NoteLost): never sent to, reported as not taken
  Status st;
  for (size_t i = 0; i < dsts.size() && st.ok(); ++i) {
    if (Lost(dsts[i])) {
      skipped.push_back(dsts[i]);
      continue;
    }
    st = MpiStatus(
        MPI_Isend(buffer->data(), int(buffer->size()), MPI_BYTE, dsts[i], tag, comm_, &reqs[i]),
        "MPI_Isend");
  }
  // MPI_Testsome (not Testall, which is all-or-nothing) nulls each finished
  // request, so on timeout the live ones name exactly the ranks missing.
  std::vector<int> done_idx(reqs.size());
  size_t left = reqs.size() - skipped.size();
  Backoff backoff;
  while (st.ok() && left > 0) {
    int n_done = 0;
    st = MpiStatus(
        MPI_Testsome(int(reqs.size()), reqs.data(), &n_done, done_idx.data(), MPI_STATUSES_IGNORE),
        "MPI_Testsome");
    if (!st.ok() || n_done == MPI_UNDEFINED) break;  // undefined: none left active
    if (n_done > 0) {
      left -= size_t(n_done);
      continue;
    }
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (size_t i = 0; i < reqs.size(); ++i)
        if (reqs[i] != MPI_REQUEST_NULL || Lost(dsts[i])) missing.push_back(dsts[i]);
      NoteLost(missing);
      st = TimeoutStatus("message not taken by", missing, timeout, phase);
      break;
    }
    backoff.Wait();
  }
  if (st.ok() && !skipped.empty()) st = TimeoutStatus("message not taken by", skipped, timeout, phase);
  // Completed requests are MPI_REQUEST_NULL; hand the rest, with the buffer, to pending_.
  for (MPI_Request r : reqs)
    if (r != MPI_REQUEST_NULL) pending_.push_back({r, buffer});
  return st;
}

Result<std::vector<std::string>> MpiComm::RecvAll(const std::vector<int>& srcs, int tag,
                                                  Clock::time_point deadline, Millis timeout,
                                                  Phase phase) {
  const WaitNote note(rank_, phase, srcs, HostsOf(*this, srcs), timeout);
  enum class State { kProbing, kReceiving, kDone };
  std::vector<State> state(srcs.size(), State::kProbing);
  std::vector<std::shared_ptr<std::string>> bufs(srcs.size());
  std::vector<MPI_Request> reqs(srcs.size(), MPI_REQUEST_NULL);
  std::vector<double> arrived_s(srcs.size(), 0.0);  // when each message completed (arrival_lags.h)
  const auto start = Clock::now();
  Status st;
  Backoff backoff;
  for (size_t left = srcs.size(); left > 0 && st.ok();) {
    bool progressed = false;
    for (size_t i = 0; i < srcs.size() && st.ok(); ++i) {
      if (state[i] == State::kProbing) {
        int found = 0;
        MPI_Message m;
        MPI_Status s;
        st = MpiStatus(MPI_Improbe(srcs[i], tag, comm_, &found, &m, &s), "MPI_Improbe");
        if (!st.ok() || !found) continue;
        int count = 0;
        MPI_Get_count(&s, MPI_BYTE, &count);
        bufs[i] = std::make_shared<std::string>(size_t(count), '\0');
        st = MpiStatus(MPI_Imrecv(bufs[i]->data(), count, MPI_BYTE, &m, &reqs[i]), "MPI_Imrecv");
        state[i] = State::kReceiving;
      }
      if (st.ok() && state[i] == State::kReceiving) {
        int done = 0;
        st = MpiStatus(MPI_Test(&reqs[i], &done, MPI_STATUS_IGNORE), "MPI_Test");
        if (done) {
          arrived_s[i] = Since(start);
          state[i] = State::kDone;
          --left;
          progressed = true;
        }
      }
    }
    if (!st.ok() || left == 0 || progressed) continue;
    if (Clock::now() >= deadline) {
      std::vector<int> missing;
      for (size_t i = 0; i < srcs.size(); ++i)
        if (state[i] != State::kDone) missing.push_back(srcs[i]);
      NoteLost(missing);
      st = TimeoutStatus("no answer from", missing, timeout, phase);
      break;
    }
    backoff.Wait();
  }
  // Matched receives cannot be cancelled; keep them (and their buffers) alive.
  for (size_t i = 0; i < srcs.size(); ++i)
    if (state[i] == State::kReceiving) pending_.push_back({reqs[i], std::move(bufs[i])});
  if (!st.ok()) return st;
  if (srcs.size() > 1) RecordMpiArrivals(phase, srcs, arrived_s);
  std::vector<std::string> out;
  out.reserve(srcs.size());
  for (auto& b : bufs) out.push_back(std::move(*b));
  return out;
}

namespace {
std::mutex g_lags_mu;
ArrivalLags g_lags;
}  // namespace

ArrivalLags MpiArrivalLags() {
  std::lock_guard<std::mutex> lock(g_lags_mu);
  return g_lags;
}

void ResetMpiArrivalLags() {
  std::lock_guard<std::mutex> lock(g_lags_mu);
  g_lags = {};
}

void RecordMpiArrivals(Phase phase, const std::vector<int>& srcs, const std::vector<double>& arrived_s) {
  const double first = *std::min_element(arrived_s.begin(), arrived_s.end());
  std::lock_guard<std::mutex> lock(g_lags_mu);
  std::vector<double>& lag = g_lags.by_phase[phase];
  for (size_t i = 0; i < srcs.size(); ++i) {
    if (size_t(srcs[i]) >= lag.size()) lag.resize(size_t(srcs[i]) + 1, 0.0);
    lag[size_t(srcs[i])] += arrived_s[i] - first;
  }
}

}  // namespace ckpt
