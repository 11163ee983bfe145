// Conversions between the Python binding's plain values and ckpt's types.
//
// A tensor entry from Python is the tuple
//   (key, dtype name, global_shape, global_offset, local_shape, replica_id,
//    flat range (begin, end) or None, allow_shape_mismatch, data address, nbytes)
// where the address is the first byte of the caller's contiguous host buffer
// (torch data_ptr() / numpy ctypes.data): no bytes are copied; the Python
// caller keeps the buffer alive for the call. An object entry is
//   (key, global_shape, global_offset, replica_id, bytes or None).
// Stats and reports come back as dicts. Errors: StatusError, translated to
// ckpt.CkptError (python/ckpt/_errors.py) with code, rank, phase.
#pragma once

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "ckpt/base/sharded_tensor.h"
#include "ckpt/protocol/async_save.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/fingerprint.h"
#include "ckpt/protocol/verify.h"

namespace ckpt::py {

namespace pyb = pybind11;

// A failed Status on its way to Python; `rank` is the reporting process's
// rank, `op` the API call ("save", "load", ...).
struct StatusError : std::runtime_error {
  StatusError(Status s, int rank, std::string op)
      : std::runtime_error(s.ToString()), status(std::move(s)), rank(rank), op(std::move(op)) {}
  Status status;
  int rank;
  std::string op;
};

// Raises ckpt.CkptError for `e` (the exception translator).
void RaiseCkptError(const StatusError& e);

// Throws StatusError unless `s` is OK.
void Check(const Status& s, int rank, const std::string& op);
template <typename T>
T Value(Result<T> r, int rank, const std::string& op) {
  Check(r.status(), rank, op);
  return std::move(r).value();
}

// Runs `fn` (returning a Result<T>) with the GIL released and returns its
// value, or throws StatusError for `op` on `rank`.
template <typename Fn>
auto RunWithoutGil(Fn fn, int rank, const std::string& op) {
  decltype(fn()) r = Status::Internal("not run");
  {
    pyb::gil_scoped_release nogil;
    r = fn();
  }
  return Value(std::move(r), rank, op);
}

// The descriptors as a state dict; a bad descriptor throws StatusError for
// `op` on `rank` (the caller's rank: errors never say "rank -1").
ShardedStateDict StateOf(const pyb::list& tensors, const pyb::list& objects, int rank, const std::string& op);

// A JSON object (the library's stats forms, stats_json.h) as a dict.
pyb::dict DictOf(const nlohmann::json& j);
pyb::dict ToDict(const SaveStats& s);
pyb::dict ToDict(const LoadStats& s);
pyb::dict ToDict(const AsyncStartStats& s);
pyb::dict ToDict(const VerifyReport& r);
pyb::dict ToDict(const Fingerprint& f);
pyb::dict ToDict(const Manifest& m);

}  // namespace ckpt::py
