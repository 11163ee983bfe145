// NcclComm (gpu.h, MakeNcclComm): Gather/Broadcast on the MPI control
// communicator, AllToAll's bytes over NCCL. Per AllToAll: sizes over MPI
// (with the deadline; also proves every peer entered the same call), sends
// staged host -> device, one ncclGroupStart/End of ncclSend/ncclRecv, the
// stream polled against the deadline and ncclCommGetAsyncError, then device
// -> host. A passed deadline or an async error aborts the NCCL communicator.
#include <chrono>
#include <cstring>
#include <thread>

#include "ckpt/base/agree.h"
#include "ckpt/gpu/cuda_util.h"
#include "ckpt/gpu/gpu.h"

namespace ckpt::gpu {
namespace {

using Clock = std::chrono::steady_clock;

std::string EncodeSize(uint64_t n) { return std::string(reinterpret_cast<const char*>(&n), sizeof n); }
uint64_t DecodeSize(const std::string& s) {
  uint64_t n = 0;
  std::memcpy(&n, s.data(), std::min(s.size(), sizeof n));
  return n;
}

// For Poll: done once the communicator's pending operation (init, group
// enqueue) has settled; settled with an error is false here, and Poll then
// reports that error from ncclCommGetAsyncError.
auto NcclSettled(ncclComm_t comm) {
  return [comm]() -> Result<bool> {
    ncclResult_t s = ncclSuccess;
    ncclCommGetAsyncError(comm, &s);
    return s == ncclSuccess;
  };
}

// A device buffer that only grows.
struct DeviceBuffer {
  std::byte* data = nullptr;
  size_t capacity = 0;
  ~DeviceBuffer() {
    if (data) cudaFree(data);
  }
  Status Reserve(size_t bytes, std::string_view who) {
    if (bytes <= capacity) return Status::Ok();
    if (data) cudaFree(data);
    data = nullptr;
    capacity = 0;
    void* p = nullptr;
    CKPT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, bytes), std::string(who) + ": cudaMalloc of " +
                                                               std::to_string(bytes) + " bytes"));
    data = static_cast<std::byte*>(p);
    capacity = bytes;
    return Status::Ok();
  }
};

class NcclComm final : public Comm {
 public:
  NcclComm(std::unique_ptr<MpiComm> control, ncclComm_t comm, cudaStream_t stream)
      : control_(std::move(control)), comm_(comm), stream_(stream) {}
  ~NcclComm() override {
    if (comm_) ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return control_->rank(); }
  int size() const override { return control_->size(); }
  int local_size() const override { return control_->local_size(); }
  Result<std::vector<std::string>> Gather(const std::string& mine, int root, Millis timeout,
                                          Phase phase) override {
    return control_->Gather(mine, root, timeout, phase);
  }
  Result<std::string> Broadcast(const std::string& msg, int root, Millis timeout, Phase phase) override {
    return control_->Broadcast(msg, root, timeout, phase);
  }
  Result<std::vector<std::string>> AllToAll(std::vector<std::string> out, Millis timeout,
                                            Phase phase) override;

  // Polls until `done` says finished, the NCCL communicator reports an error,
  // or the deadline passes (then aborts the communicator).
  template <typename Done>
  Status Poll(Done done, Clock::time_point deadline, Millis timeout, std::string_view what, Phase phase);

 private:
  // The received bytes (device recv_ at recv_off) copied to the host, with
  // this rank's own message `mine` in its slot.
  Result<std::vector<std::string>> CopyIn(std::string mine, const std::vector<size_t>& recv_off,
                                          Phase phase);
  std::string Who(Phase phase) const {
    return "rank " + std::to_string(rank()) + ": NCCL data plane, phase '" + std::string(PhaseName(phase)) + "'";
  }
  void Abort() {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  std::unique_ptr<MpiComm> control_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  DeviceBuffer send_, recv_;
};

template <typename Done>
Status NcclComm::Poll(Done done, Clock::time_point deadline, Millis timeout, std::string_view what,
                      Phase phase) {
  int us = 20;
  for (;;) {
    CKPT_ASSIGN_OR_RETURN(bool finished, done());
    if (finished) return Status::Ok();
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      Status st = NcclStatus(async, Who(phase) + ": " + std::string(what), comm_);
      Abort();
      return st;
    }
    if (Clock::now() >= deadline) {
      Abort();
      return Status::Timeout(Who(phase) + ": " + std::string(what) + " did not finish within " +
                             std::to_string(timeout.count()) + " ms; NCCL communicator aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(us));
    us = std::min(us * 2, 1000);
  }
}

Result<std::vector<std::string>> NcclComm::AllToAll(std::vector<std::string> out, Millis timeout,
                                                    Phase phase) {
  const int n = size(), me = rank();
  if (out.size() != size_t(n))
    return Status::InvalidArgument(Who(phase) + ": AllToAll needs " + std::to_string(n) + " messages, got " +
                                   std::to_string(out.size()));
  if (!comm_) return Status::FailedPrecondition(Who(phase) + ": the NCCL communicator was aborted by an earlier error");
  const auto deadline = Clock::now() + timeout;
  std::vector<std::string> sizes(n);
  for (int d = 0; d < n; ++d) sizes[d] = EncodeSize(out[d].size());
  CKPT_ASSIGN_OR_RETURN(auto got_sizes, control_->AllToAll(std::move(sizes), timeout, phase));
  std::vector<size_t> send_off(n + 1, 0), recv_off(n + 1, 0);
  for (int d = 0; d < n; ++d) {
    send_off[d + 1] = send_off[d] + (d == me ? 0 : out[d].size());
    recv_off[d + 1] = recv_off[d] + (d == me ? 0 : DecodeSize(got_sizes[d]));
  }
  CKPT_RETURN_IF_ERROR(send_.Reserve(send_off[n], Who(phase)));
  CKPT_RETURN_IF_ERROR(recv_.Reserve(recv_off[n], Who(phase)));
  for (int d = 0; d < n; ++d)
    if (d != me && !out[d].empty())
      CKPT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(send_.data + send_off[d], out[d].data(), out[d].size(),
                                                      cudaMemcpyHostToDevice, stream_),
                                      Who(phase) + ": cudaMemcpyAsync H2D"));
  ncclResult_t r = ncclGroupStart();
  for (int d = 0; d < n && r == ncclSuccess; ++d) {
    if (d == me) continue;
    if (send_off[d + 1] > send_off[d])
      r = ncclSend(send_.data + send_off[d], send_off[d + 1] - send_off[d], ncclUint8, d, comm_, stream_);
    if (r == ncclSuccess && recv_off[d + 1] > recv_off[d])
      r = ncclRecv(recv_.data + recv_off[d], recv_off[d + 1] - recv_off[d], ncclUint8, d, comm_, stream_);
  }
  const ncclResult_t end = ncclGroupEnd();
  if (r == ncclSuccess) r = end;
  if (r != ncclSuccess && r != ncclInProgress) {
    Status st = NcclStatus(r, Who(phase) + ": ncclSend/ncclRecv group", comm_);
    Abort();
    return st;
  }
  // A non-blocking communicator may still be enqueueing the group when
  // ncclGroupEnd returns (ncclInProgress): the stream is only meaningful after.
  CKPT_RETURN_IF_ERROR(Poll(NcclSettled(comm_), deadline, timeout, "enqueueing ncclSend/ncclRecv", phase));
  auto stream_done = [&]() -> Result<bool> {
    const cudaError_t q = cudaStreamQuery(stream_);
    if (q == cudaErrorNotReady) return false;
    CKPT_RETURN_IF_ERROR(CudaStatus(q, Who(phase) + ": cudaStreamQuery"));
    return true;
  };
  CKPT_RETURN_IF_ERROR(Poll(stream_done, deadline, timeout, "exchange of " + std::to_string(send_off[n]) +
                                                                " bytes sent / " + std::to_string(recv_off[n]) +
                                                                " bytes received",
                            phase));
  return CopyIn(std::move(out[me]), recv_off, phase);
}

Result<std::vector<std::string>> NcclComm::CopyIn(std::string mine, const std::vector<size_t>& recv_off,
                                                  Phase phase) {
  const int n = size(), me = rank();
  std::vector<std::string> in(n);
  in[me] = std::move(mine);
  for (int d = 0; d < n; ++d) {
    if (d == me) continue;
    in[d].resize(recv_off[d + 1] - recv_off[d]);
    if (!in[d].empty())
      CKPT_RETURN_IF_ERROR(CudaStatus(cudaMemcpy(in[d].data(), recv_.data + recv_off[d], in[d].size(),
                                                 cudaMemcpyDeviceToHost),
                                      Who(phase) + ": cudaMemcpy D2H"));
  }
  return in;
}

}  // namespace

Result<std::unique_ptr<Comm>> MakeNcclComm(std::unique_ptr<MpiComm> control, Millis timeout) {
  const int me = control->rank();
  const std::string who = "rank " + std::to_string(me) + ": NCCL data plane";
  // Every rank checks its device first and reports: one rank without a device
  // fails them all at once instead of leaving the others in ncclCommInitRank.
  // One AgreeOutcomes (agree.h): rank 0's outcome carries the unique id, the
  // others' an empty payload, a failure its typed Status.
  ncclUniqueId id{};
  Result<int> device = SelectDevice(who);
  Status ready = device.status();
  if (ready.ok() && me == 0) ready = NcclStatus(ncclGetUniqueId(&id), who + ": ncclGetUniqueId");
  const Result<std::string> mine =
      !ready.ok() ? Result<std::string>(ready)
                  : Result<std::string>(me == 0 ? std::string(reinterpret_cast<const char*>(&id), sizeof id) : "");
  auto payloads = AgreeOutcomes(control.get(), mine, Phase::kNcclInit, timeout);
  if (!payloads.ok()) {  // a rank without a usable device fails all; a lost rank stays a timeout
    const Status& st = payloads.status();
    if (st.code() == Code::kTimeout) return st;
    return Status(Code::kFailedPrecondition, who + ": " + st.message(), st.origin_rank(), st.phase())
        .WithCause(st.cause());
  }
  if ((*payloads)[0].size() != sizeof id)
    return Status::Internal(who + ": rank 0 sent a NCCL unique id of " + std::to_string((*payloads)[0].size()) +
                            " bytes, not " + std::to_string(sizeof id));
  std::memcpy(&id, (*payloads)[0].data(), sizeof id);

  cudaStream_t stream = nullptr;
  CKPT_RETURN_IF_ERROR(CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), who + ": cudaStreamCreate"));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait polls against a deadline
  ncclComm_t comm = nullptr;
  ncclResult_t r = ncclCommInitRankConfig(&comm, control->size(), id, me, &config);
  if (r != ncclSuccess && r != ncclInProgress) {
    cudaStreamDestroy(stream);
    return NcclStatus(r, who + ": ncclCommInitRankConfig", comm);
  }
  auto nccl = std::make_unique<NcclComm>(std::move(control), comm, stream);
  CKPT_RETURN_IF_ERROR(
      nccl->Poll(NcclSettled(comm), Clock::now() + timeout, timeout, "ncclCommInitRankConfig", Phase::kNcclInit));
  return std::unique_ptr<Comm>(std::move(nccl));
}

}  // namespace ckpt::gpu
