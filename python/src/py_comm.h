// Comm implementations for the Python binding.
//
// CallbackComm: the Comm contract (ckpt/base/comm.h) over a Python object
// with the methods
//   gather(mine: bytes, root: int, timeout_s: float, phase: str) -> list[bytes] (root) / None
//   broadcast(msg: bytes, root: int, timeout_s: float, phase: str) -> bytes
//   alltoall(out: list[bytes], timeout_s: float, phase: str) -> list[bytes]
// and the attributes rank, size (read once); optionally host(rank) -> str | None
// (Comm::host). An exception with `missing_ranks` (and `missing_hosts`,
// `missing_phase`) becomes a Status with those as its typed MissingPeers. ckpt.TorchComm (python/ckpt/
// _torch_comm.py) is one: it runs the collectives over torch.distributed's
// store with per-call deadlines. A Python exception with a `code` attribute
// naming a ckpt Code ("Timeout", "Aborted", ...) becomes a Status of that code
// with the exception's text; any other exception becomes kAborted.
//
// Threading: the C++ protocol calls these methods with the GIL released
// (possibly from an AsyncSaver's background thread); each call takes the GIL
// for the duration of the Python call. One thread uses a CallbackComm at a time.
//
// CommHandle: what Python holds (ckpt._ckpt.Comm): a shared Comm and, for MPI,
// the process's MpiSession. CloseAll() releases every MPI communicator before
// MPI_Finalize (registered with Python's atexit).
#pragma once

#include <pybind11/pybind11.h>

#include <memory>
#include <string>

#include "ckpt/base/comm.h"
#include "ckpt/mpi/launcher_term.h"  // the binding's launcher_terminating / end_after_launcher_term

namespace ckpt::py {

namespace pyb = pybind11;

class CallbackComm final : public Comm {
 public:
  explicit CallbackComm(pyb::object impl);
  ~CallbackComm() override;
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string host(int r) const override;
  Result<std::vector<std::string>> Gather(const std::string& mine, int root, Millis timeout,
                                          Phase phase) override;
  Result<std::string> Broadcast(const std::string& msg, int root, Millis timeout, Phase phase) override;
  Result<std::vector<std::string>> AllToAll(std::vector<std::string> out, Millis timeout,
                                            Phase phase) override;

 private:
  pyb::object impl_;
  int rank_ = 0, size_ = 1;
};

struct CommHandle {
  std::shared_ptr<Comm> comm;
  std::string kind;  // "local", "mpi", "callback"
  Comm* get() const { return comm.get(); }
};

// A handle over one rank (no collectives).
std::shared_ptr<CommHandle> LocalCommHandle();
// Initialises MPI (MPI_THREAD_MULTIPLE requested) unless already initialised
// (e.g. by mpi4py: then ckpt never finalises it) and duplicates MPI_COMM_WORLD.
// Collective over MPI_COMM_WORLD without a timeout.
std::shared_ptr<CommHandle> MpiCommHandle();
// A duplicate of an MPI handle's communicator (for an async saver's own thread).
std::shared_ptr<CommHandle> DupMpiCommHandle(const CommHandle& h);
std::shared_ptr<CommHandle> CallbackCommHandle(pyb::object impl);
// Frees every MPI communicator still held, then finalises MPI if ckpt
// initialised it. Idempotent.
void ShutdownMpi();

}  // namespace ckpt::py
