// The local tier for Python: thin calls into ckpt/protocol/local_tier.h over
// a Comm handle (MPI, torch.distributed callbacks, local); the GIL is released
// while they run (a callback comm takes it back for its own calls).
#include "py_tiers.h"

#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include "ckpt/base/env.h"
#include "ckpt/base/timeout.h"
#include "ckpt/protocol/local_async.h"
#include "ckpt/protocol/local_tier.h"
#include "ckpt/protocol/stats_json.h"
#include "py_comm.h"
#include "py_state.h"

namespace ckpt::py {
namespace {

namespace pyb = pybind11;

LocalTierOptions TierOpts(const std::string& dir, int ranks_per_node, int replicas, const std::shared_ptr<CommHandle>& comm,
                          double timeout_s, const std::string& layout) {
  LocalTierOptions o;
  o.dir = dir;
  o.ranks_per_node = ranks_per_node;
  o.replicas = replicas;
  o.comm = comm ? comm->get() : nullptr;
  const int rank = o.comm ? o.comm->rank() : 0;
  o.timeout = Value(CheckTimeoutSeconds(timeout_s, "timeout"), rank, "local tier");
  o.layout = nlohmann::json::parse(layout);
  return o;
}

int RankOf(const LocalTierOptions& o) { return o.comm ? o.comm->rank() : 0; }

// Runs a collective tier call with the GIL released (other Python threads go
// on) and turns its failure into the Python exception of its cause.
template <class Call>
auto WithoutGil(int rank, const char* what, Call&& call) {
  decltype(call()) r = Status::Internal("not run");
  {
    pyb::gil_scoped_release nogil;
    r = call();
  }
  return Value(std::move(r), rank, what);
}

pyb::dict ChooseTierOf(const std::string& dir, int ranks_per_node, int replicas, const std::shared_ptr<CommHandle>& comm,
                       double timeout_s, const std::string& layout, const std::string& global_root) {
  LocalTierOptions o = TierOpts(dir, ranks_per_node, replicas, comm, timeout_s, layout);
  TierChoice c = WithoutGil(RankOf(o), "choose tier", [&] { return ChooseResumeTier(o, global_root); });
  pyb::dict d;
  d["tier"] = c.tier;
  d["iteration"] = c.iteration;
  d["why"] = c.why;
  d["local_iteration"] = c.local_iteration;
  d["global_iteration"] = c.global_iteration;
  return d;
}

pyb::tuple LocalRestoreOf(const pyb::list& tensors, const pyb::list& objects, int64_t iteration, const std::string& dir,
                          int ranks_per_node, int replicas, const std::shared_ptr<CommHandle>& comm, double timeout_s,
                          const std::string& layout) {
  LocalTierOptions o = TierOpts(dir, ranks_per_node, replicas, comm, timeout_s, layout);
  ShardedStateDict sd = StateOf(tensors, objects, RankOf(o), "local restore");
  LocalRestoreStats st = WithoutGil(RankOf(o), "local restore", [&] { return LocalRestore(sd, iteration, o); });
  pyb::dict d;
  d["iteration"] = st.iteration;
  d["fetched_bytes"] = st.fetched_bytes;
  d["sent_bytes"] = st.sent_bytes;
  d["from_rank"] = st.from_rank;
  d["seconds"] = st.seconds;
  pyb::list objs;
  for (const auto& e : sd.objects())
    objs.append(pyb::bytes(reinterpret_cast<const char*>(e.bytes.data()), e.bytes.size()));
  return pyb::make_tuple(d, objs);
}

pyb::dict LocalStatsOf(const LocalSaveStats& st) {
  nlohmann::json j = LocalSaveStatsJson(st);
  j.update({{"iteration", st.iteration}, {"seconds", st.seconds}});
  return DictOf(j);
}

pyb::object JobOf(const std::optional<LocalJobStats>& job) {
  if (!job) return pyb::none();
  pyb::dict d;
  d["iteration"] = job->iteration;
  d["local"] = LocalStatsOf(job->local);
  d["background_seconds"] = job->background_seconds;
  if (job->drained) {
    pyb::dict g = ToDict(job->drain);
    g["drained_from"] = job->drained_from;
    d["global"] = g;
  } else {
    d["global"] = pyb::none();
  }
  return d;
}

// The global save of an iteration drained from the rank's committed local
// copy (as the CLI's TrainSaver::MakeDrain): into `root`, on the tier's comm.
SaveOptions DrainOptions(const LocalTierOptions& lt, const std::string& root, const std::string& metadata) {
  SaveOptions so;
  so.root = root;
  so.comm = lt.comm;
  so.timeout = lt.timeout;
  so.allow_older = true;
  so.metadata = nlohmann::json::parse(metadata);
  so.layout = lt.layout;
  if (!so.layout.contains("world")) so.layout["world"] = lt.comm ? lt.comm->size() : 1;
  return so;
}

// AsyncLocalSaver (ckpt/protocol/local_async.h) over the comm dedicated to
// its background job (the job comm's async duplicate; kept alive with it).
class PyLocalSaver {
 public:
  explicit PyLocalSaver(std::shared_ptr<CommHandle> comm) : comm_(std::move(comm)) {}
  ~PyLocalSaver() {
    pyb::gil_scoped_release nogil;  // a callback comm in flight needs the GIL
    saver_.reset();
  }
  // Joins the previous job (raising its error), snapshots the state and
  // starts local iteration `iteration`; a non-empty `root` also drains it
  // there (the global tier) after the local commit.
  pyb::dict Start(const pyb::list& tensors, const pyb::list& objects, int64_t iteration, const std::string& dir,
                  int ranks_per_node, int replicas, double timeout_s, const std::string& layout,
                  const std::string& root, const std::string& metadata) {
    LocalTierOptions o = TierOpts(dir, ranks_per_node, replicas, comm_, timeout_s, layout);
    ShardedStateDict sd = StateOf(tensors, objects, RankOf(o), "local save");
    std::optional<SaveOptions> drain;
    if (!root.empty()) drain = DrainOptions(o, root, metadata);
    LocalStartStats st = WithoutGil(RankOf(o), "local save", [&] { return saver_->Start(sd, iteration, o, drain); });
    pyb::dict d;
    d["iteration"] = iteration;
    d["mode"] = "background";
    d["blocking_seconds"] = st.blocking_seconds();
    d["wait_previous_seconds"] = st.wait_previous_seconds;
    d["snapshot_seconds"] = st.snapshot_seconds;
    d["allocate_seconds"] = st.allocate_seconds;
    d["snapshot_bytes"] = st.snapshot_bytes;
    d["joined"] = JobOf(st.previous);
    return d;
  }
  // Allocates (and faults in) the snapshot arena for these tensors now;
  // joins a job in flight first (raising its error). Returns the capacity.
  int64_t Reserve(const pyb::list& tensors) {
    const int rank = comm_ && comm_->get() ? comm_->get()->rank() : 0;
    ShardedStateDict sd = StateOf(tensors, pyb::list(), rank, "local save");
    Status st;
    {
      pyb::gil_scoped_release nogil;
      st = saver_->Reserve(AsyncLocalSaver::ArenaBytes(sd));
    }
    Check(st, rank, "local save");
    return saver_->arena_capacity();
  }
  // Joins the job in flight (raising its error); None when there is none.
  pyb::object Wait() {
    if (!saver_->in_flight()) return pyb::none();
    const int rank = comm_ && comm_->get() ? comm_->get()->rank() : 0;
    return JobOf(WithoutGil(rank, "local save", [&] { return saver_->Wait(); }));
  }
  bool InFlight() const { return saver_->in_flight(); }

 private:
  std::shared_ptr<CommHandle> comm_;
  std::unique_ptr<AsyncLocalSaver> saver_ = std::make_unique<AsyncLocalSaver>();
};

}  // namespace

void DefineTiers(pyb::module_& m) {
  m.def("choose_tier", &ChooseTierOf);
  m.def("local_restore", &LocalRestoreOf);
  pyb::class_<PyLocalSaver>(m, "LocalSaver")
      .def(pyb::init<std::shared_ptr<CommHandle>>())
      .def("start", &PyLocalSaver::Start)
      .def("reserve", &PyLocalSaver::Reserve)
      .def("wait", &PyLocalSaver::Wait)
      .def("in_flight", &PyLocalSaver::InFlight);
}

}  // namespace ckpt::py
