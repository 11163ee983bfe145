// The local tier for Python: thin calls into ckpt/protocol/local_tier.h over
// a Comm handle (MPI, torch.distributed callbacks, local); the GIL is released
// while they run (a callback comm takes it back for its own calls).
#include "py_tiers.h"

#include <pybind11/stl.h>

#include <nlohmann/json.hpp>

#include "ckpt/base/env.h"
#include "ckpt/base/timeout.h"
#include "ckpt/protocol/local_tier.h"
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

pyb::dict LocalSaveOf(const pyb::list& tensors, const pyb::list& objects, int64_t iteration, const std::string& dir,
                      int ranks_per_node, int replicas, const std::shared_ptr<CommHandle>& comm, double timeout_s,
                      const std::string& layout, int64_t pinned) {
  LocalTierOptions o = TierOpts(dir, ranks_per_node, replicas, comm, timeout_s, layout);
  o.pinned = pinned;  // the iteration a background drain still reads (-1: none)
  ShardedStateDict sd = StateOf(tensors, objects, RankOf(o), "local save");
  LocalSaveStats st = WithoutGil(RankOf(o), "local save", [&] { return LocalSave(sd, iteration, o); });
  pyb::dict d;
  d["iteration"] = st.iteration;
  d["own_bytes"] = st.own_bytes;
  d["network_bytes_sent"] = st.sent_bytes;
  d["network_bytes_received"] = st.received_bytes;
  d["buffer_bytes"] = st.buffer_bytes;
  d["write_seconds"] = st.write_seconds;
  d["replicate_seconds"] = st.replicate_seconds;
  d["commit_seconds"] = st.commit_seconds;
  d["seconds"] = st.seconds;
  return d;
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

// The global save of `iteration` drained from this rank's committed local copy
// (as the CLI's TrainSaver::MakeDrain): the live tensors give only the
// metadata; the bytes are read from <node dir>/rank_<r>/iter_N (chunk hashes
// checked) into buffers of the drain's own, then saved under `root`. Meant
// for a background thread on a comm of its own (the GIL is released).
pyb::dict LocalDrainOf(const pyb::list& tensors, const pyb::list& objects, int64_t iteration, const std::string& dir,
                       int ranks_per_node, int replicas, const std::shared_ptr<CommHandle>& comm, double timeout_s,
                       const std::string& layout, const std::string& root, const std::string& metadata) {
  LocalTierOptions lt = TierOpts(dir, ranks_per_node, replicas, comm, timeout_s, layout);
  const int rank = RankOf(lt);
  std::vector<std::byte> buf;
  ShardedStateDict sd = DrainBuffers(StateOf(tensors, objects, rank, "global drain"), &buf);
  SaveOptions so;
  so.root = root;
  so.iteration = iteration;
  so.comm = lt.comm;
  so.timeout = lt.timeout;
  so.allow_older = true;
  so.metadata = nlohmann::json::parse(metadata);
  so.layout = lt.layout;
  if (!so.layout.contains("world")) so.layout["world"] = lt.comm ? lt.comm->size() : 1;
  LoadOptions lo;
  lo.root = JoinPath(lt.NodeDir(lt.node_of(rank)), "rank_" + std::to_string(rank));
  lo.iteration = iteration;
  lo.env = lt.env;
  lo.timeout = lt.timeout;
  SaveStats st = WithoutGil(rank, "global drain", [&]() -> Result<SaveStats> {
    return DrainLocalCopy(sd, lo, so,
                          "global drain of iteration " + std::to_string(iteration) + " from the local tier " + lo.root);
  });
  pyb::dict d = ToDict(st);
  d["drained_from"] = lo.root;
  return d;
}

}  // namespace

void DefineTiers(pyb::module_& m) {
  m.def("local_save", &LocalSaveOf);
  m.def("choose_tier", &ChooseTierOf);
  m.def("local_restore", &LocalRestoreOf);
  m.def("local_drain", &LocalDrainOf);
}

}  // namespace ckpt::py
