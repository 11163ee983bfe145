// MpiComm across real processes; run under mpirun (see CMakeLists.txt here).
//
//   mpi_comm_main collectives          Gather/Broadcast/AllGather/Barrier/Split
//   mpi_comm_main timeout-gather S T   rank S sleeps past T ms; root 0 must time
//                                      out naming S within T + 1 s, then all resync
//   mpi_comm_main timeout-bcast T      root 0 sleeps past T ms; every other rank
//                                      must time out naming rank 0, then all resync
//   mpi_comm_main timeout-send T       root 0 sleeps past T ms in a gather; rank 1's
//                                      1 MiB message cannot complete: rank 1 times
//                                      out naming rank 0; the late root still gets
//                                      it intact (the buffer outlives the call)
// Exit status 0 iff every check on this rank held; failures are printed with the rank.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "ckpt/mpi/comm_mpi.h"
#include "reshard/parallel_state.h"

namespace ckpt {
namespace {

using Clock = std::chrono::steady_clock;
constexpr Millis kLong{20000};

int g_rank = -1;
int g_failures = 0;

void Check(bool ok, const std::string& what) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "rank %d: CHECK FAILED: %s\n", g_rank, what.c_str());
}

void CheckOk(const Status& st, const std::string& what) {
  Check(st.ok(), what + ": " + st.ToString());
}

// Rank r's message: distinctive, and large for rank 1 so it takes MPI's rendezvous path.
std::string Payload(int r, int round) {
  size_t n = r == 1 ? (1u << 20) : size_t(r * 7);
  std::string s = "r" + std::to_string(r) + "/" + std::to_string(round) + ":";
  for (size_t i = 0; i < n; ++i) s += char('a' + (i * 31 + r) % 26);
  return s;
}

void TestGatherBroadcast(MpiComm& comm) {
  const int n = comm.size(), me = comm.rank();
  for (int round = 0; round < 50; ++round) {
    int root = round % n;
    auto got = comm.Gather(Payload(me, round), root, kLong, Phase::kReport);
    CheckOk(got.status(), "gather round " + std::to_string(round));
    if (!got.ok()) return;
    if (me == root) {
      Check(int(got->size()) == n, "gather size");
      for (int r = 0; r < n && r < int(got->size()); ++r)
        Check((*got)[r] == Payload(r, round), "gather content from rank " + std::to_string(r));
    } else {
      Check(got->empty(), "non-root gather result is empty");
    }
    auto b = comm.Broadcast(me == root ? Payload(1, round) : "ignored", root, kLong, Phase::kReport);
    CheckOk(b.status(), "broadcast round " + std::to_string(round));
    Check(b.ok() && *b == Payload(1, round), "broadcast content");
  }
}

void TestAllGatherBarrierSplit(MpiComm& comm) {
  const int n = comm.size(), me = comm.rank();
  auto all = comm.AllGather(std::to_string(me * me), kLong, Phase::kReport);
  CheckOk(all.status(), "allgather");
  for (int r = 0; all.ok() && r < n; ++r) Check((*all)[r] == std::to_string(r * r), "allgather[r]");
  CheckOk(comm.Barrier(kLong, Phase::kReport), "barrier");
  auto empty = comm.Broadcast(std::string(), 0, kLong, Phase::kReport);
  Check(empty.ok() && empty->empty(), "empty broadcast");
  Check(comm.Gather("x", n, kLong, Phase::kReport).status().code() == Code::kInvalidArgument,
        "bad root is InvalidArgument");

  // DP groups of tp=2 x dp=n/2 as sub-communicators (color = first member).
  ParallelConfig pc{2, 1, n / 2, 1, 1, 1};
  auto members = DpGroup(pc, me);
  CheckOk(members.status(), "DpGroup");
  if (!members.ok()) return;
  auto sub = comm.Split(members->front(), me);
  CheckOk(sub.status(), "split");
  if (!sub.ok()) return;
  Check((*sub)->size() == int(members->size()), "split size");
  for (int r = 0; r < (*sub)->size(); ++r) Check((*sub)->host(r) == ThisHostName(), "split host of every rank");
  for (int r = 0; r < n; ++r) Check(comm.host(r) == ThisHostName(), "host of every rank");
  auto sub_all = (*sub)->AllGather(std::to_string(me), kLong, Phase::kDpSum);
  CheckOk(sub_all.status(), "sub allgather");
  for (size_t i = 0; sub_all.ok() && i < members->size(); ++i)
    Check((*sub_all)[i] == std::to_string((*members)[i]), "sub allgather member order");
  CheckOk(comm.Barrier(kLong, Phase::kReport), "barrier after split");
}

// Expects `st` to be the Timeout naming `missing` in `phase`, raised within [T, T + 1 s].
void CheckTimeout(const Status& st, Clock::time_point start, Millis t, int missing,
                  Phase phase, const std::string& what = "no answer from") {
  auto elapsed = std::chrono::duration_cast<Millis>(Clock::now() - start);
  std::printf("rank %d: %s after %lld ms\n", g_rank, st.ToString().c_str(),
              static_cast<long long>(elapsed.count()));
  Check(st.code() == Code::kTimeout, "expected Timeout, got " + st.ToString());
  const std::string host = ThisHostName();
  std::string want = "rank " + std::to_string(g_rank) + ": " + what + " rank(s) " +
                     std::to_string(missing) + " within " + std::to_string(t.count()) +
                     " ms in phase '" + std::string(PhaseName(phase)) + "' (rank " + std::to_string(missing) + " on host '" + host + "')";
  Check(st.message() == want, "message '" + st.message() + "' != '" + want + "'");
  // The lost peer is recorded typed too: rank, the host gathered at Create, phase.
  Check(st.missing().ranks == std::vector<int>{missing}, "typed missing ranks");
  Check(st.missing().hosts == std::vector<std::string>{host} && !host.empty(), "typed missing host");
  Check(st.missing().phase == phase, "typed missing phase '" + std::string(PhaseName(st.missing().phase)) + "'");
  Check(elapsed >= t && elapsed <= t + Millis(1000),
        "timed out after " + std::to_string(elapsed.count()) + " ms, deadline " +
            std::to_string(t.count()) + " ms");
}

void TestTimeoutGather(MpiComm& comm, int sleeper, Millis t) {
  const int me = comm.rank();
  if (me == sleeper) std::this_thread::sleep_for(t + Millis(1500));
  auto start = Clock::now();
  auto got = comm.Gather("vote-" + std::to_string(me), 0, t, Phase::kVote);
  if (me == 0)
    CheckTimeout(got.status(), start, t, sleeper, Phase::kVote);
  else
    CheckOk(got.status(), "non-root vote send");
  // The root reports the failure; everyone (the sleeper too, late) hears it.
  auto decision = comm.Broadcast(me == 0 ? "abort" : "", 0, kLong, Phase::kCommit);
  Check(decision.ok() && *decision == "abort",
        "decision broadcast: " + decision.status().ToString());
  CheckOk(comm.Barrier(kLong, Phase::kStart), "barrier after timeout");
}

void TestTimeoutBroadcast(MpiComm& comm, Millis t) {
  const int me = comm.rank();
  if (me == 0) std::this_thread::sleep_for(t + Millis(1500));
  auto start = Clock::now();
  auto got = comm.Broadcast(me == 0 ? "late" : "", 0, t, Phase::kCommit);
  if (me != 0) CheckTimeout(got.status(), start, t, 0, Phase::kCommit);
  // The late message has an old tag: the next call must not pick it up.
  auto all = comm.AllGather(std::to_string(me), kLong, Phase::kStart);
  CheckOk(all.status(), "allgather after timeout");
  for (int r = 0; all.ok() && r < comm.size(); ++r) Check((*all)[r] == std::to_string(r), "resync");
}

void TestTimeoutSend(MpiComm& comm, Millis t) {
  const int me = comm.rank();
  if (me == 0) std::this_thread::sleep_for(t + Millis(1500));
  auto start = Clock::now();
  auto got = comm.Gather(Payload(me, 0), 0, t, Phase::kVote);
  if (me == 1) {
    CheckTimeout(got.status(), start, t, 0, Phase::kVote, "message not taken by");
  } else {
    CheckOk(got.status(), "big-vote");
  }
  if (me == 0 && got.ok())
    for (int r = 0; r < comm.size(); ++r)
      Check((*got)[r] == Payload(r, 0), "late root got rank " + std::to_string(r) + " intact");
  CheckOk(comm.Barrier(kLong, Phase::kStart), "barrier after send timeout");
}

int Run(int argc, char** argv) {
  auto session = MpiSession::Init(&argc, &argv);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().ToString().c_str());
    return 2;
  }
  auto comm = MpiComm::Create();
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", comm.status().ToString().c_str());
    return 2;
  }
  g_rank = (*comm)->rank();
  std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "collectives") {
    Check((*comm)->size() % 2 == 0, "collectives needs an even number of ranks");
    TestGatherBroadcast(**comm);
    TestAllGatherBarrierSplit(**comm);
  } else if (mode == "timeout-gather" && argc == 4) {
    TestTimeoutGather(**comm, std::atoi(argv[2]), Millis(std::atoi(argv[3])));
  } else if (mode == "timeout-bcast" && argc == 3) {
    TestTimeoutBroadcast(**comm, Millis(std::atoi(argv[2])));
  } else if (mode == "timeout-send" && argc == 3) {
    TestTimeoutSend(**comm, Millis(std::atoi(argv[2])));
  } else {
    std::fprintf(
        stderr,
        "usage: %s collectives | timeout-gather SLEEPER MS | timeout-bcast MS | timeout-send MS\n",
        argv[0]);
    return 2;
  }
  std::printf("rank %d: %s %s\n", g_rank, mode.c_str(), g_failures ? "FAILED" : "OK");
  return g_failures ? 1 : 0;
}

}  // namespace
}  // namespace ckpt

int main(int argc, char** argv) { return ckpt::Run(argc, argv); }
