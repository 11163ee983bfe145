// PyProgress and its callback sink: see py_progress.h.
#include "py_progress.h"

#include <atomic>

namespace ckpt::py {
namespace {

class CallbackSink final : public ProgressSink {
 public:
  explicit CallbackSink(pyb::object fn) : fn_(std::move(fn)) {}
  ~CallbackSink() override {
    pyb::gil_scoped_acquire gil;  // drops the reference under the GIL, from any thread
    fn_ = pyb::object();
  }
  void OnProgress(const ProgressSnapshot& s) override {
    if (broken_) return;
    pyb::gil_scoped_acquire gil;
    try {
      pyb::dict d;
      d["op"] = s.op;
      d["phase"] = s.phase;
      d["bytes_done"] = s.bytes_done;
      d["bytes_total"] = s.bytes_total;
      d["files_done"] = s.files_done;
      d["files_total"] = s.files_total;
      d["elapsed"] = s.elapsed_s;
      d["rate"] = s.rate;
      d["eta"] = s.eta_s;
      d["final"] = s.final;
      fn_(d);
    } catch (pyb::error_already_set& e) {
      broken_ = true;  // one report, then quiet: progress never fails the operation
      e.discard_as_unraisable("ckpt progress callback");
    }
  }

 private:
  pyb::object fn_;
  std::atomic<bool> broken_{false};
};

}  // namespace

PyProgress::PyProgress(const pyb::object& callback, std::string op, Env* target, bool count_writes,
                       std::string file_suffix)
    : ProgressSession(std::move(op), target) {
  if (callback.is_none()) return;
  if (!PyCallable_Check(callback.ptr())) throw pyb::type_error("ckpt: progress must be a callable or None");
  Attach(std::make_unique<CallbackSink>(callback), count_writes, std::move(file_suffix));
  Start();
}

PyProgress::~PyProgress() {
  if (!reporting()) return;
  pyb::gil_scoped_release nogil;  // an exception unwound past Finish: join without holding the GIL
  Detach();
}

}  // namespace ckpt::py
