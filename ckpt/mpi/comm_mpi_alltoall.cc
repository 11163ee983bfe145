// MpiComm::AllToAll: a personalised exchange as polled nonblocking
// point-to-point with one deadline (the data plane of shared load reads).
#include <climits>
#include <thread>

#include "ckpt/mpi/comm_mpi.h"

namespace ckpt {

Result<std::vector<std::string>> MpiComm::AllToAll(std::vector<std::string> out, Millis timeout,
                                                   Phase phase) {
  if (out.size() != size_t(size_))
    return Status::InvalidArgument("rank " + std::to_string(rank_) + ": AllToAll needs " + std::to_string(size_) +
                                   " messages, got " + std::to_string(out.size()) + " in phase '" +
                                   std::string(PhaseName(phase)) + "'");
  for (const auto& msg : out)
    if (msg.size() > size_t(INT_MAX))
      return Status::InvalidArgument("rank " + std::to_string(rank_) + ": message of " + std::to_string(msg.size()) +
                                     " bytes is too large in phase '" + std::string(PhaseName(phase)) + "'");
  Reap();
  const int tag = NextTag();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // Post every send first: receives below then never wait on our send order.
  std::vector<int> peers;
  std::vector<std::shared_ptr<std::string>> bufs;
  std::vector<MPI_Request> reqs;
  Status st;
  for (int d = 0; d < size_ && st.ok(); ++d) {
    if (d == rank_) continue;
    peers.push_back(d);
    bufs.push_back(std::make_shared<std::string>(std::move(out[d])));
    reqs.push_back(MPI_REQUEST_NULL);
    st = MpiStatus(MPI_Isend(bufs.back()->data(), int(bufs.back()->size()), MPI_BYTE, d, tag, comm_, &reqs.back()),
                   "MPI_Isend");
  }
  Result<std::vector<std::string>> got = st.ok() ? RecvAll(peers, tag, deadline, timeout, phase) : Result<std::vector<std::string>>(st);
  // Our sends complete once the peers matched them (they did if they answered).
  int us = 20;
  while (got.ok()) {
    int all_done = 0;
    Status t = MpiStatus(MPI_Testall(int(reqs.size()), reqs.data(), &all_done, MPI_STATUSES_IGNORE), "MPI_Testall");
    if (!t.ok()) {
      got = t;
      break;
    }
    if (all_done) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      got = TimeoutStatus("messages not taken by", peers, timeout, phase);
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(us));
    us = std::min(us * 2, 1000);
  }
  for (size_t i = 0; i < reqs.size(); ++i)
    if (reqs[i] != MPI_REQUEST_NULL) pending_.push_back({reqs[i], bufs[i]});
  if (!got.ok()) return got.status();
  std::vector<std::string> in(size_);
  in[rank_] = std::move(out[rank_]);
  for (size_t i = 0; i < peers.size(); ++i) in[peers[i]] = std::move((*got)[i]);
  return in;
}

}  // namespace ckpt
