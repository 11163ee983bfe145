// ckpt._ckpt: the pybind11 extension under the ckpt Python package.
//
// Plain functions over the C++ library; the package (python/ckpt) builds the
// descriptor tuples (py_state.h) from torch tensors and numpy arrays, pickles
// objects and turns results into Python values. Every call that reads or
// writes a checkpoint releases the GIL; tensor bytes are never copied here
// (the C++ protocol reads and writes the caller's buffers in place).
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstdlib>
#include <memory>

#include "py_comm.h"
#include "py_convert.h"
#include "py_family.h"
#include "py_hdf5.h"
#include "py_progress.h"
#include "py_state.h"
#include "py_tiers.h"
#include "ckpt/base/timeout.h"
#include "ckpt/format/manifest.h"
#include "ckpt/protocol/retention.h"
#include "ckpt/storage/s3/s3_storage.h"

namespace ckpt::py {
namespace {

Comm* CommOf(const std::shared_ptr<CommHandle>& h) { return h ? h->get() : nullptr; }
int RankOf(const std::shared_ptr<CommHandle>& h) { return h && h->get() ? h->get()->rank() : 0; }
// timeout=<seconds> of the Python API: the check --timeout-ms uses (timeout.h);
// inf, NaN, 0 and more than 7 days raise InvalidArgumentError saying the range.
Millis MillisOf(double seconds, const char* op) { return Value(CheckTimeoutSeconds(seconds, "timeout"), -1, op); }
int WorldOf(const std::shared_ptr<CommHandle>& h) { return h && h->get() ? h->get()->size() : 1; }

// The manifest's "layout" of a Python-API save: the caller's layout= object
// plus "world", the size of the comm the save runs over. TP/PP/DP are not
// inferred: generic descriptors do not say which parallel group shards them
// (docs/FORMAT.md); a caller that knows them passes layout={"tp": ..., ...}.
nlohmann::json LayoutOf(const std::string& layout, int world, int rank, const std::string& op) {
  nlohmann::json j = nlohmann::json::parse(layout);
  if (!j.is_object()) Check(Status::InvalidArgument("layout must be a dict, not " + j.dump()), rank, op);
  if (!j.contains("world")) j["world"] = world;
  if (j["world"] != world)
    Check(Status::InvalidArgument("layout " + j.dump() + " names world " + j["world"].dump() + ", but the comm has " +
                                  std::to_string(world) + " rank(s)"),
          rank, op);
  return j;
}

SaveOptions SaveOpts(const std::string& root, int64_t iteration, const std::string& compress, double timeout_s,
                     const std::string& metadata, const std::string& layout, int64_t chunk_bytes,
                     bool allow_older, const std::string& chunk_hash, int direct_io, int rank,
                     const std::string& op, int world) {
  SaveOptions o;
  if (direct_io >= 0) o.write.direct_io = direct_io != 0;  // -1: CKPT_DIRECT_IO decides (on unless 0)
  o.write.hash = Value(ParseChunkHash(chunk_hash), rank, op);
  o.allow_older = allow_older;
  o.root = root;
  o.iteration = iteration;
  o.timeout = Value(CheckTimeoutSeconds(timeout_s, "timeout"), rank, op);
  o.write.codec.compression = Value(ParseCompression(compress), rank, op);
  if (chunk_bytes > 0) o.write.chunk_bytes = chunk_bytes;
  o.metadata = nlohmann::json::parse(metadata);
  o.layout = LayoutOf(layout, world, rank, op);
  return o;
}

pyb::dict Save(const pyb::list& tensors, const pyb::list& objects, const std::string& root, int64_t iteration,
               const std::shared_ptr<CommHandle>& comm, const std::string& compress, double timeout_s,
               const std::string& metadata, const std::string& layout, int64_t chunk_bytes, bool allow_older,
               const std::string& chunk_hash, int direct_io, const pyb::object& progress) {
  ShardedStateDict sd = StateOf(tensors, objects, RankOf(comm), "save");
  SaveOptions o = SaveOpts(root, iteration, compress, timeout_s, metadata, layout, chunk_bytes, allow_older,
                           chunk_hash, direct_io, RankOf(comm), "save", WorldOf(comm));
  o.comm = CommOf(comm);
  PyProgress meter(progress, "save", DefaultEnv(), /*count_writes=*/true);
  meter.SetTotals(sd.TotalBytes(), 1);  // this rank's raw bytes, one shard file
  o.env = meter.env();
  Result<SaveStats> r = Status::Internal("not run");
  {
    pyb::gil_scoped_release nogil;
    r = SaveCheckpoint(sd, o);
    meter.Finish();
  }
  return ToDict(Value(std::move(r), RankOf(comm), "save"));
}

pyb::tuple Load(const pyb::list& tensors, const pyb::list& objects, const std::string& root, int64_t iteration,
                const std::shared_ptr<CommHandle>& comm, const std::string& strict, double timeout_s,
                bool verify_hashes, bool fallback, int direct_io, const pyb::object& progress) {
  ShardedStateDict sd = StateOf(tensors, objects, RankOf(comm), "load");
  PyProgress meter(progress, "load", DefaultEnv(), /*count_writes=*/false);
  meter.SetTotals(sd.TotalBytes(), 0);  // the raw bytes asked for (stored bytes may differ: an estimate)
  LoadOptions o;
  o.env = meter.env();
  // -1: CKPT_DIRECT_IO decides (auto when unset); 0 off, 1 on, 2 auto
  if (direct_io >= 0) o.direct_io = direct_io == 0 ? DirectRead::kOff : direct_io == 1 ? DirectRead::kOn : DirectRead::kAuto;
  o.root = root;
  o.iteration = iteration;
  o.comm = CommOf(comm);
  o.timeout = MillisOf(timeout_s, "load");
  o.verify_hashes = verify_hashes;
  o.fallback = fallback;
  o.strict = Value(ParseStrictMode(strict), RankOf(comm), "load");
  Result<LoadStats> r = Status::Internal("not run");
  {
    pyb::gil_scoped_release nogil;
    r = LoadCheckpoint(sd, o);
    meter.Finish();
  }
  pyb::dict stats = ToDict(Value(std::move(r), RankOf(comm), "load"));
  pyb::list objs;
  for (const auto& e : sd.objects())
    objs.append(pyb::bytes(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size()));
  return pyb::make_tuple(stats, objs);
}

// AsyncSaver over a dedicated Comm handle (kept alive with it).
class PyAsyncSaver {
 public:
  explicit PyAsyncSaver(std::shared_ptr<CommHandle> comm)
      : comm_(std::move(comm)), saver_(std::make_unique<AsyncSaver>(CommOf(comm_) ? CommOf(comm_) : &local_)) {}
  ~PyAsyncSaver() {
    {
      pyb::gil_scoped_release nogil;  // a callback comm in flight needs the GIL
      saver_.reset();
    }
    meter_.reset();  // with the GIL held (its reporter is joined without it)
  }
  // progress: a callable reporting the background drain's writes (this
  // rank's); its final event comes when the save is joined (Wait).
  pyb::dict Start(const pyb::list& tensors, const pyb::list& objects, const std::string& root, int64_t iteration,
                  const std::string& compress, double timeout_s, const std::string& metadata,
                  const std::string& layout, int64_t chunk_bytes, bool allow_older, const std::string& chunk_hash,
                  int direct_io, const pyb::object& progress) {
    ShardedStateDict sd = StateOf(tensors, objects, rank(), "async_save");
    SaveOptions o = SaveOpts(root, iteration, compress, timeout_s, metadata, layout, chunk_bytes, allow_older,
                             chunk_hash, direct_io, rank(), "async_save", WorldOf(comm_));
    FinishMeter();  // the previous save was joined (async_save waits for it first)
    meter_ = std::make_unique<PyProgress>(progress, "async_save", DefaultEnv(), /*count_writes=*/true);
    meter_->SetTotals(sd.TotalBytes(), 1);  // this rank's raw bytes, one shard file
    o.env = meter_->env();  // the drain writes through it: meter_ lives until Wait
    Result<AsyncStartStats> r = Status::Internal("not run");
    {
      pyb::gil_scoped_release nogil;
      r = saver_->Start(sd, o);
    }
    if (!r.ok()) FinishMeter();
    return ToDict(Value(std::move(r), rank(), "async_save"));
  }
  // Pre-allocates the snapshot arena for these tensors (AsyncSaver::Reserve);
  // returns the arena capacity in bytes.
  int64_t Reserve(const pyb::list& tensors) {
    ShardedStateDict sd = StateOf(tensors, pyb::list(), rank(), "async_save");
    Status st;
    {
      pyb::gil_scoped_release nogil;
      st = saver_->Reserve(AsyncSaver::ArenaBytes(sd));
    }
    Check(st, rank(), "async_save");
    return saver_->arena_capacity();
  }
  pyb::dict Wait() {
    Result<SaveStats> r = Status::Internal("not run");
    {
      pyb::gil_scoped_release nogil;
      r = saver_->Wait();
    }
    FinishMeter();
    pyb::dict d = ToDict(Value(std::move(r), rank(), "async_save"));
    d["background_seconds"] = saver_->last_background_seconds();
    return d;
  }
  bool Done() const { return saver_->finished(); }
  bool InFlight() const { return saver_->in_flight(); }
  int rank() const { return RankOf(comm_); }

 private:
  // Emits the final progress event of the joined save and drops the meter (GIL held).
  void FinishMeter() {
    if (!meter_) return;
    {
      pyb::gil_scoped_release nogil;
      meter_->Finish();
    }
    meter_.reset();
  }
  std::shared_ptr<CommHandle> comm_;
  LocalComm local_;
  std::unique_ptr<PyProgress> meter_;  // the save in flight's (outlives its drain: reset after Wait)
  std::unique_ptr<AsyncSaver> saver_;
};

pyb::dict Inspect(const std::string& root, int64_t iteration) {
  return ToDict(RunWithoutGil([&] { return ReadManifest(DefaultEnv(), root, iteration); }, 0, "inspect"));
}

pyb::dict Verify(const std::string& root, int64_t iteration, const pyb::object& progress) {
  VerifyOptions o;
  o.iteration = iteration;
  PyProgress meter(progress, "verify", DefaultEnv(), /*count_writes=*/false);
  meter.SetTotalsFromManifest(root, iteration);
  return ToDict(RunWithoutGil([&] {
    auto r = VerifyCheckpoint(meter.env(), root, o);
    meter.Finish();
    return r;
  }, 0, "verify"));
}

pyb::dict FingerprintOf(const std::string& root, int64_t iteration, const pyb::object& progress) {
  FingerprintOptions o;
  o.iteration = iteration;
  PyProgress meter(progress, "fingerprint", DefaultEnv(), /*count_writes=*/false);
  meter.SetTotalsFromManifest(root, iteration);
  o.env = meter.env();
  return ToDict(RunWithoutGil([&] {
    auto r = FingerprintCheckpoint(root, o);
    meter.Finish();
    return r;
  }, 0, "fingerprint"));
}

// Committed iterations under root, ascending (ListIterations: a root that
// does not exist holds none). root may be any registered URL (s3://...).
std::vector<int64_t> ListIterationsOf(const std::string& root) {
  return RunWithoutGil([&] { return ListIterations(DefaultEnv(), root); }, 0, "list_iterations");
}

// What a load of "the latest" picks (LatestIteration; kNotFound if none).
int64_t LatestOf(const std::string& root) {
  return RunWithoutGil([&] { return LatestIteration(DefaultEnv(), root); }, 0, "latest");
}

// ApplyRetention after `newest` committed: {"deleted": [...], "kept": [...]}.
pyb::dict RetainOf(const std::string& root, int64_t newest, int64_t keep_last, int64_t keep_every) {
  RetentionPolicy p;
  p.keep_last = keep_last;
  p.keep_every = keep_every;
  Check(ValidateRetention(p), 0, "retention");
  RetentionResult r = RunWithoutGil([&] { return ApplyRetention(DefaultEnv(), root, newest, p); }, 0, "retention");
  pyb::dict d;
  d["deleted"] = r.deleted;
  d["kept"] = r.kept;
  return d;
}

}  // namespace

PYBIND11_MODULE(_ckpt, m) {
  m.doc() = "ckpt C++ library binding (use the ckpt package, not this module)";
  // The binding is an edge: s3:// roots open here (AWS_* read at each open).
  if (Status st = s3::RegisterS3Scheme(); !st.ok()) throw StatusError(st, 0, "import");
  pyb::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      RaiseCkptError(e);
    }
  });
  pyb::class_<CommHandle, std::shared_ptr<CommHandle>>(m, "Comm")
      .def_property_readonly("rank", [](const CommHandle& h) { return h.get() ? h.get()->rank() : -1; })
      .def_property_readonly("size", [](const CommHandle& h) { return h.get() ? h.get()->size() : -1; })
      .def_readonly("kind", &CommHandle::kind);
  DefineTiers(m);
  DefineFamily(m);
  m.def("local_comm", &LocalCommHandle);
  m.def("mpi_comm", &MpiCommHandle);
  m.def("dup_mpi_comm", [](const std::shared_ptr<CommHandle>& h) { return DupMpiCommHandle(*h); });
  m.def("callback_comm", &CallbackCommHandle);
  m.def("shutdown_mpi", &ShutdownMpi);
  m.def("launcher_terminating", &LauncherTerminating);  // a SIGTERM deferred (ckpt/mpi/launcher_term.h)
  m.def("end_after_launcher_term", [](const std::string& outcome) { EndAfterLauncherTerm(outcome); });
  m.def("save", &Save);
  m.def("load", &Load);
  m.def("inspect", &Inspect);
  m.def("verify", &Verify, pyb::arg("root"), pyb::arg("iteration"), pyb::arg("progress") = pyb::none());
  m.def("fingerprint", &FingerprintOf, pyb::arg("root"), pyb::arg("iteration"), pyb::arg("progress") = pyb::none());
  m.def("list_iterations", &ListIterationsOf);
  m.def("latest", &LatestOf);
  m.def("apply_retention", &RetainOf);
  DefineConvert(m);
  DefineHdf5(m);
  pyb::class_<PyAsyncSaver>(m, "AsyncSaver")
      .def(pyb::init<std::shared_ptr<CommHandle>>())
      .def("start", &PyAsyncSaver::Start)
      .def("reserve", &PyAsyncSaver::Reserve)
      .def("wait", &PyAsyncSaver::Wait)
      .def("done", &PyAsyncSaver::Done)
      .def("in_flight", &PyAsyncSaver::InFlight);
}

}  // namespace ckpt::py
