// Comm helpers and the thread-backed Comm used by unit tests.
#include "ckpt/base/comm.h"

#include "ckpt/base/status_wire.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include <unistd.h>

namespace ckpt {

std::string ThisHostName() {
  char host[256] = {0};
  if (::gethostname(host, sizeof host - 1) != 0) return "";
  return host;
}

std::string PackStrings(const std::vector<std::string>& parts) {
  std::string out;
  for (const auto& p : parts) {
    uint64_t n = p.size();
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out += p;
  }
  return out;
}

Result<std::vector<std::string>> UnpackStrings(std::string_view packed) {
  std::vector<std::string> parts;
  size_t pos = 0;
  while (pos < packed.size()) {
    uint64_t n;
    if (packed.size() - pos < sizeof n) return Status::Corruption("truncated packed message");
    std::memcpy(&n, packed.data() + pos, sizeof n);
    pos += sizeof n;
    if (packed.size() - pos < n) return Status::Corruption("truncated packed message");
    parts.emplace_back(packed.substr(pos, n));
    pos += n;
  }
  return parts;
}

int DefaultWorkerThreads(const Comm* comm) {
  const int hw = int(std::max(1u, std::thread::hardware_concurrency()));
  const int local = comm ? std::max(1, comm->local_size()) : 1;
  return std::max(1, hw / local);
}

namespace {

// A decision on the wire is an outcome (status_wire.h): root's decision, or
// root's failure, which keeps its code and origin (root, unless it relayed).
Result<std::string> OpenDecision(std::string_view msg, int me, int root, Phase phase) {
  Result<std::string> got = DecodeOutcome(msg);
  if (got.ok()) return got;
  const Status& st = got.status();
  return Status(st.code(),
                "rank " + std::to_string(me) + ": aborted by rank " + std::to_string(root) + ": " + st.message(),
                st.has_origin() ? st.origin_rank() : root, st.has_origin() ? st.phase() : phase)
      .WithMissing(st.missing())
      .WithCause(st.cause());
}

}  // namespace

Result<std::string> Comm::GatherDecide(const std::string& mine, int root, Millis timeout,
                                       Phase gather_phase, Phase decide_phase,
                                       const Decide& decide) {
  auto parts = Gather(mine, root, timeout, gather_phase);
  if (rank() != root) {
    if (!parts.ok()) return parts.status();  // root did not take our message in time
    CKPT_ASSIGN_OR_RETURN(std::string got, Broadcast(std::string(), root, DecisionTimeout(timeout), decide_phase));
    return OpenDecision(got, rank(), root, gather_phase);
  }
  if (!parts.ok()) {  // tell the survivors who was missing, then fail the same way
    Broadcast(EncodeFailure(parts.status().At(root, gather_phase)), root, std::min(timeout, kErrorSendGrace), decide_phase)
        .status()
        .IgnoreError();
    return parts.status().At(root, gather_phase);
  }
  CKPT_ASSIGN_OR_RETURN(std::string sent, Broadcast(EncodeOutcome(decide(std::move(parts).value())), root, timeout,
                                                    decide_phase));
  return DecodeOutcome(sent);
}

Result<std::vector<std::string>> Comm::AllGather(const std::string& mine, Millis timeout,
                                                 Phase phase) {
  CKPT_ASSIGN_OR_RETURN(std::string all, GatherDecide(mine, 0, timeout, phase, phase,
                                                      [](std::vector<std::string> parts) {
                                                        return PackStrings(parts);
                                                      }));
  return UnpackStrings(all);
}

namespace {

Status CheckAllToAllSize(size_t got, int size, int rank, Phase phase) {
  if (got == size_t(size)) return Status::Ok();
  return Status::InvalidArgument("rank " + std::to_string(rank) + ": AllToAll needs " + std::to_string(size) +
                                 " messages, got " + std::to_string(got) + " in phase '" +
                                 std::string(PhaseName(phase)) + "'");
}

}  // namespace

Result<std::vector<std::string>> LocalComm::AllToAll(std::vector<std::string> out, Millis, Phase phase) {
  CKPT_RETURN_IF_ERROR(CheckAllToAllSize(out.size(), 1, 0, phase));
  return out;
}

Status Comm::Barrier(Millis timeout, Phase phase) {
  return AllGather(std::string(), timeout, phase).status();
}

namespace {

// Mailboxes keyed by (src, dst, sequence number); each rank numbers its calls.
struct ThreadGroup {
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::tuple<int, int, uint64_t>, std::string> box;
};

class ThreadComm final : public Comm {
 public:
  ThreadComm(std::shared_ptr<ThreadGroup> g, int rank, int size)
      : g_(std::move(g)), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return size_; }  // every thread rank shares this process's node
  std::string host(int) const override { return ThisHostName(); }

  Result<std::vector<std::string>> Gather(const std::string& mine, int root, Millis timeout,
                                          Phase phase) override {
    uint64_t seq = seq_++;
    if (rank_ != root) {
      Send(root, seq, mine);
      return std::vector<std::string>{};
    }
    std::vector<std::string> out(size_);
    out[root] = mine;
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int r = 0; r < size_; ++r) {
      if (r == root) continue;
      auto msg = Recv(r, seq, deadline, phase);
      if (!msg.ok()) return msg.status();
      out[r] = std::move(msg).value();
    }
    return out;
  }

  Result<std::string> Broadcast(const std::string& msg, int root, Millis timeout,
                                Phase phase) override {
    uint64_t seq = seq_++;
    if (rank_ == root) {
      for (int r = 0; r < size_; ++r)
        if (r != root) Send(r, seq, msg);
      return msg;
    }
    return Recv(root, seq, std::chrono::steady_clock::now() + timeout, phase);
  }

  Result<std::vector<std::string>> AllToAll(std::vector<std::string> out, Millis timeout,
                                            Phase phase) override {
    CKPT_RETURN_IF_ERROR(CheckAllToAllSize(out.size(), size_, rank_, phase));
    uint64_t seq = seq_++;
    for (int r = 0; r < size_; ++r)
      if (r != rank_) Send(r, seq, out[r]);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    std::vector<std::string> in(size_);
    in[rank_] = std::move(out[rank_]);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      CKPT_ASSIGN_OR_RETURN(in[r], Recv(r, seq, deadline, phase));
    }
    return in;
  }

 private:
  void Send(int dst, uint64_t seq, const std::string& m) {
    std::lock_guard<std::mutex> lock(g_->mu);
    g_->box[{rank_, dst, seq}] = m;
    g_->cv.notify_all();
  }
  Result<std::string> Recv(int src, uint64_t seq, std::chrono::steady_clock::time_point deadline,
                           Phase phase) {
    std::unique_lock<std::mutex> lock(g_->mu);
    auto key = std::make_tuple(src, rank_, seq);
    while (!g_->box.count(key)) {
      if (g_->cv.wait_until(lock, deadline) == std::cv_status::timeout && !g_->box.count(key))
        return Status::Timeout("rank " + std::to_string(rank_) + ": no answer from rank " +
                               std::to_string(src) + " in phase '" + std::string(PhaseName(phase)) + "'")
            .WithMissing({{src}, {host(src)}, phase});
    }
    std::string m = std::move(g_->box[key]);
    g_->box.erase(key);
    return m;
  }

  std::shared_ptr<ThreadGroup> g_;
  int rank_, size_;
  uint64_t seq_ = 0;
};

}  // namespace

std::vector<std::unique_ptr<Comm>> MakeThreadComms(int n) {
  auto g = std::make_shared<ThreadGroup>();
  std::vector<std::unique_ptr<Comm>> out;
  for (int i = 0; i < n; ++i) out.push_back(std::make_unique<ThreadComm>(g, i, n));
  return out;
}

}  // namespace ckpt
