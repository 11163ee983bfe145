// CallbackComm and the Comm handles of the Python binding.
#include "py_comm.h"

#include <pybind11/stl.h>

#include <set>

#include "ckpt/mpi/comm_mpi.h"

namespace ckpt::py {
namespace {

// A Python exception raised by a comm callback, as a Status of its `code`.
Status StatusOfPython(pyb::error_already_set& e) {
  Code code = Code::kAborted;
  if (pyb::hasattr(e.value(), "code")) {
    const std::string name = pyb::str(e.value().attr("code"));
    for (int c = 1; c <= int(kLastCode); ++c)
      if (CodeName(Code(c)) == name) code = Code(c);
  }
  std::string text = pyb::hasattr(e.value(), "message") ? pyb::str(e.value().attr("message")) : pyb::str(e.value());
  Status st(code, text);
  // A deadline failure names its missing peers as fields (ckpt.TorchComm:
  // missing_ranks, missing_hosts, missing_phase): the same typed MissingPeers
  // an MpiComm timeout carries, so reports and checks never parse the text.
  if (pyb::hasattr(e.value(), "missing_ranks")) {
    MissingPeers peers;
    for (auto r : e.value().attr("missing_ranks")) peers.ranks.push_back(r.cast<int>());
    if (pyb::hasattr(e.value(), "missing_hosts"))
      for (auto h : e.value().attr("missing_hosts")) peers.hosts.push_back(pyb::str(h));
    if (pyb::hasattr(e.value(), "missing_phase"))  // the phase name this comm was called with
      peers.phase = ParsePhase(std::string(pyb::str(e.value().attr("missing_phase")))).value_or(Phase::kNone);
    if (!peers.empty()) st = st.WithMissing(std::move(peers));
  }
  return st;
}

double Seconds(Millis t) { return double(t.count()) / 1000.0; }

std::vector<std::string> AsStrings(const pyb::handle& list) {
  std::vector<std::string> out;
  for (auto item : list) out.push_back(item.cast<std::string>());
  return out;
}

pyb::list AsBytesList(const std::vector<std::string>& parts) {
  pyb::list l;
  for (const auto& p : parts) l.append(pyb::bytes(p));
  return l;
}

}  // namespace

CallbackComm::CallbackComm(pyb::object impl) : impl_(std::move(impl)) {
  rank_ = impl_.attr("rank").cast<int>();
  size_ = impl_.attr("size").cast<int>();
}

std::string CallbackComm::host(int r) const {
  if (r < 0 || r >= size_) return "";
  pyb::gil_scoped_acquire gil;
  try {
    if (!pyb::hasattr(impl_, "host")) return "";
    pyb::object h = impl_.attr("host")(r);
    return h.is_none() ? std::string() : h.cast<std::string>();
  } catch (pyb::error_already_set&) {
    return "";  // unknown: the caller names the rank only
  }
}

CallbackComm::~CallbackComm() {
  pyb::gil_scoped_acquire gil;
  impl_ = pyb::object();
}

Result<std::vector<std::string>> CallbackComm::Gather(const std::string& mine, int root, Millis timeout,
                                                      Phase phase) {
  pyb::gil_scoped_acquire gil;
  try {
    pyb::object r = impl_.attr("gather")(pyb::bytes(mine), root, Seconds(timeout), std::string(PhaseName(phase)));
    if (rank_ != root) return std::vector<std::string>{};
    auto parts = AsStrings(r);
    if (int(parts.size()) != size_) return Status::Internal("comm gather returned a list of the wrong size");
    return parts;
  } catch (pyb::error_already_set& e) {
    return StatusOfPython(e);
  }
}

Result<std::string> CallbackComm::Broadcast(const std::string& msg, int root, Millis timeout,
                                            Phase phase) {
  pyb::gil_scoped_acquire gil;
  try {
    return impl_.attr("broadcast")(pyb::bytes(msg), root, Seconds(timeout), std::string(PhaseName(phase))).cast<std::string>();
  } catch (pyb::error_already_set& e) {
    return StatusOfPython(e);
  }
}

Result<std::vector<std::string>> CallbackComm::AllToAll(std::vector<std::string> out, Millis timeout,
                                                        Phase phase) {
  pyb::gil_scoped_acquire gil;
  try {
    auto parts = AsStrings(impl_.attr("alltoall")(AsBytesList(out), Seconds(timeout), std::string(PhaseName(phase))));
    if (int(parts.size()) != size_) return Status::Internal("comm alltoall returned a list of the wrong size");
    return parts;
  } catch (pyb::error_already_set& e) {
    return StatusOfPython(e);
  }
}

namespace {

struct MpiState {
  std::unique_ptr<MpiSession> session;
  std::set<std::weak_ptr<CommHandle>, std::owner_less<std::weak_ptr<CommHandle>>> handles;
  bool finalized = false;
};

MpiState& Mpi() {
  static MpiState* s = new MpiState;  // never destroyed: ShutdownMpi runs at Python exit
  return *s;
}

[[noreturn]] void ThrowStatus(const Status& s) { throw std::runtime_error(s.ToString()); }

std::shared_ptr<CommHandle> Register(std::unique_ptr<MpiComm> c) {
  auto h = std::make_shared<CommHandle>(CommHandle{std::shared_ptr<Comm>(std::move(c)), "mpi"});
  Mpi().handles.insert(h);
  return h;
}

}  // namespace

std::shared_ptr<CommHandle> LocalCommHandle() {
  return std::make_shared<CommHandle>(CommHandle{std::make_shared<LocalComm>(), "local"});
}

std::shared_ptr<CommHandle> MpiCommHandle() {
  MpiState& s = Mpi();
  if (s.finalized) ThrowStatus(Status::FailedPrecondition("MPI was already finalised by ckpt"));
  // mpirun's SIGTERM after a node loss waits for a save/load wait's deadline,
  // which names the lost ranks and host (launcher_term.h); elsewhere it is as before.
  DeferTerminationInWaits();
  if (!s.session) {
    auto session = MpiSession::Init(nullptr, nullptr);
    if (!session.ok()) ThrowStatus(session.status());
    s.session = std::move(session).value();
  }
  auto c = MpiComm::Create(MPI_COMM_WORLD);
  if (!c.ok()) ThrowStatus(c.status());
  return Register(std::move(c).value());
}

std::shared_ptr<CommHandle> DupMpiCommHandle(const CommHandle& h) {
  auto* m = dynamic_cast<MpiComm*>(h.comm.get());
  if (!m) ThrowStatus(Status::InvalidArgument("not an MPI communicator (closed?)"));
  auto c = m->Split(0, m->rank());
  if (!c.ok()) ThrowStatus(c.status());
  return Register(std::move(c).value());
}

std::shared_ptr<CommHandle> CallbackCommHandle(pyb::object impl) {
  return std::make_shared<CommHandle>(CommHandle{std::make_shared<CallbackComm>(std::move(impl)), "callback"});
}

void ShutdownMpi() {
  MpiState& s = Mpi();
  for (const auto& w : s.handles)
    if (auto h = w.lock()) h->comm.reset();
  s.handles.clear();
  s.session.reset();  // finalises only if ckpt initialised MPI
  s.finalized = true;
}

}  // namespace ckpt::py
