// ckpt_lab: the benchmark-only Python module of the harness (never installed;
// built next to the ckpt package in <build>/python so that
// `PYTHONPATH=build/python python3 -c 'import ckpt_lab'` works). bench/python_api.py
// measures with it; the product module (ckpt._ckpt) carries no benchmark.
//   memcpy_seconds(tensors, reps) -> float: median seconds of `reps` memcpys of
//     the tensors into one buffer (the async blocking baseline)
//   comm_bench(comm_handle, op, reps, bytes, timeout_s) -> float: mean seconds
//     per call of one Comm collective ("gather", "broadcast", "allgather",
//     "barrier", "alltoall") with `bytes`-byte messages, after a warm-up barrier
// Errors raise the ckpt exceptions (ckpt.errors), as the product module does.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ckpt/base/clock.h"
#include "ckpt/base/timeout.h"
#include "ckpt/protocol/async_save.h"
#include "python/src/py_comm.h"
#include "python/src/py_state.h"

namespace ckpt::py {
namespace {

double MemcpySeconds(const pyb::list& tensors, int reps) {
  ShardedStateDict sd = StateOf(tensors, pyb::list(), 0, "memcpy");
  std::vector<std::byte> dst(size_t(std::max<int64_t>(sd.TotalBytes(), 1)));
  pyb::gil_scoped_release nogil;
  return Value(MedianStateMemcpySeconds(sd, dst, reps), 0, "memcpy");
}

Status OneCall(Comm* c, const std::string& op, const std::string& msg, Millis t) {
  if (op == "gather") return c->Gather(msg, 0, t, Phase::kBench).status();
  if (op == "broadcast") return c->Broadcast(msg, 0, t, Phase::kBench).status();
  if (op == "allgather") return c->AllGather(msg, t, Phase::kBench).status();
  if (op == "barrier") return c->Barrier(t, Phase::kBench);
  if (op == "alltoall") return c->AllToAll(std::vector<std::string>(size_t(c->size()), msg), t, Phase::kBench).status();
  return Status::InvalidArgument("unknown collective '" + op + "'");
}

double CommBench(const std::shared_ptr<CommHandle>& h, const std::string& op, int reps, int64_t bytes,
                 double timeout_s) {
  Comm* c = h ? h->get() : nullptr;
  if (!c) Check(Status::InvalidArgument("comm_bench needs a comm"), 0, "comm_bench");
  const std::string msg(size_t(bytes), 'x');
  const Millis t = Value(CheckTimeoutSeconds(timeout_s, "timeout"), -1, "comm_bench");
  pyb::gil_scoped_release nogil;
  Check(c->Barrier(t, Phase::kBench), c->rank(), "comm_bench");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) Check(OneCall(c, op, msg, t), c->rank(), "comm_bench");
  return Since(t0) / std::max(reps, 1);
}

}  // namespace

PYBIND11_MODULE(ckpt_lab, m) {
  m.doc() = "ckpt harness: benchmark helpers (build tree only; import ckpt first)";
  pyb::module_::import("ckpt");  // registers the Comm handle type this module takes
  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      RaiseCkptError(e);
    }
  });
  m.def("memcpy_seconds", &MemcpySeconds);
  m.def("comm_bench", &CommBench);
}

}  // namespace ckpt::py
