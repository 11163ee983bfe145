// Conversions between the Python binding's plain values and ckpt's types.
#include "py_state.h"

#include <pybind11/stl.h>

#include "ckpt/format/manifest.h"
#include "ckpt/protocol/stats_json.h"

namespace ckpt::py {
namespace {

Shape ShapeOf(const pyb::handle& h) {
  Shape s;
  for (auto v : h) s.push_back(v.cast<int64_t>());
  return s;
}

ReplicaId ReplicaOf(const pyb::handle& h) {
  ReplicaId r;
  for (auto v : h) r.push_back(v.cast<int32_t>());
  return r;
}

pyb::tuple ShapeTuple(const Shape& s) { return pyb::cast(s); }

// The rank and phase a Status records as its origin, where Status has them
// (the typed error protocol of issue 13.4); otherwise left as they are.
template <typename S>
void OriginOf(const S& s, int* rank, std::string* phase) {
  if constexpr (requires { s.origin_rank(); s.phase(); }) {
    *rank = s.origin_rank();
    *phase = std::string(PhaseName(s.phase()));
  }
}

// Python's ckpt.CkptError subclass for a code, via ckpt._errors.make_error;
// the class follows the typed cause (Status::cause()) of a relayed failure.
pyb::object MakeError(const StatusError& e) {
  int origin = -1;
  std::string phase;
  OriginOf(e.status, &origin, &phase);
  pyb::object make = pyb::module_::import("ckpt._errors").attr("make_error");
  const MissingPeers& m = e.status.missing();  // the typed lost peers of a deadline failure
  return make(std::string(CodeName(e.status.code())), e.status.message(), e.rank, e.op, origin, phase,
              std::string(CodeName(e.status.cause())),
              pyb::make_tuple(pyb::cast(m.ranks), pyb::cast(m.hosts), std::string(PhaseName(m.phase))));
}

}  // namespace

void RaiseCkptError(const StatusError& e) {
  pyb::object err = MakeError(e);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
}

void Check(const Status& s, int rank, const std::string& op) {
  if (!s.ok()) throw StatusError(s, rank, op);
}

ShardedStateDict StateOf(const pyb::list& tensors, const pyb::list& objects, int rank, const std::string& op) {
  ShardedStateDict sd;
  for (auto item : tensors) {
    auto t = item.cast<pyb::tuple>();
    ShardedTensor m;
    m.key = t[0].cast<std::string>();
    m.dtype = Value(ParseDType(t[1].cast<std::string>()), rank, op);
    m.global_shape = ShapeOf(t[2]);
    m.global_offset = ShapeOf(t[3]);
    m.local_shape = ShapeOf(t[4]);
    m.replica_id = ReplicaOf(t[5]);
    if (!t[6].is_none()) {
      auto fr = t[6].cast<pyb::tuple>();
      m.flat_range = FlatRange{fr[0].cast<int64_t>(), fr[1].cast<int64_t>()};
    }
    m.allow_shape_mismatch = t[7].cast<bool>();
    auto* ptr = reinterpret_cast<std::byte*>(t[8].cast<uintptr_t>());
    sd.AddTensor(std::move(m), std::span<std::byte>(ptr, t[9].cast<size_t>()));
  }
  for (auto item : objects) {
    auto o = item.cast<pyb::tuple>();
    ShardedObject m{o[0].cast<std::string>(), ShapeOf(o[1]), ShapeOf(o[2]), ReplicaOf(o[3])};
    std::vector<std::byte> bytes;
    if (!o[4].is_none()) {
      std::string b = o[4].cast<std::string>();
      bytes.assign(reinterpret_cast<const std::byte*>(b.data()), reinterpret_cast<const std::byte*>(b.data()) + b.size());
    }
    sd.AddObject(std::move(m), std::move(bytes));
  }
  return sd;
}

// The stats dicts are the library's one JSON form of the stats
// (ckpt/protocol/stats_json.h: the keys the CLI's --json uses too).
pyb::dict DictOf(const nlohmann::json& j) {
  return pyb::module_::import("json").attr("loads")(j.dump()).cast<pyb::dict>();
}

pyb::dict ToDict(const SaveStats& s) { return DictOf(SaveStatsJson(s)); }

pyb::dict ToDict(const LoadStats& s) { return DictOf(LoadStatsJson(s)); }

pyb::dict ToDict(const AsyncStartStats& s) {
  pyb::dict d;
  d["wait_previous_seconds"] = s.wait_previous_seconds;
  d["snapshot_seconds"] = s.snapshot_seconds;
  d["snapshot_bytes"] = s.snapshot_bytes;
  d["allocate_seconds"] = s.allocate_seconds;
  d["blocking_seconds"] = s.blocking_seconds();
  return d;
}

pyb::dict ToDict(const VerifyReport& r) {
  pyb::dict d;
  d["ok"] = r.ok();
  d["iteration"] = r.iteration;
  d["files_checked"] = r.files_checked;
  d["chunks_checked"] = r.chunks_checked;
  d["bytes_checked"] = r.bytes_checked;
  d["direct_read_bytes"] = r.direct_read_bytes;
  d["files_cached"] = r.files_cached;
  d["seconds"] = r.seconds;
  pyb::list issues;
  for (const auto& i : r.issues) issues.append(i.ToString());
  d["issues"] = issues;
  d["removed"] = r.removed;
  pyb::list notes;
  for (const auto& n : r.notes) notes.append(n);
  d["notes"] = notes;
  return d;
}

pyb::dict ToDict(const Fingerprint& f) {
  pyb::dict d;
  d["iteration"] = f.iteration;
  d["digest"] = f.digest;
  pyb::dict tensors, objects;
  for (const auto& t : f.tensors) tensors[pyb::str(t.key)] = t.digest;
  for (const auto& o : f.objects)
    objects[pyb::str(o.key)] = o.included ? pyb::object(pyb::str(o.digest)) : pyb::object(pyb::none());
  d["tensors"] = tensors;
  d["objects"] = objects;
  d["bytes_hashed"] = f.bytes_hashed;
  d["seconds"] = f.seconds;
  return d;
}

pyb::dict ToDict(const Manifest& m) {
  pyb::dict d;
  d["iteration"] = m.iteration;
  d["format_version"] = m.format_version;
  d["chunk_hash"] = std::string(ChunkHashName(m.chunk_hash));
  d["layout"] = m.layout.dump();
  d["metadata"] = m.metadata.dump();
  pyb::dict tensors;
  for (const auto& s : m.shards) {
    std::string key = s.meta.key;
    if (!tensors.contains(key)) {
      pyb::dict t;
      t["dtype"] = std::string(DTypeName(s.meta.dtype));
      t["shape"] = ShapeTuple(s.meta.global_shape);
      t["shards"] = 0;
      t["allow_shape_mismatch"] = s.meta.allow_shape_mismatch;
      tensors[pyb::str(key)] = t;
    }
    pyb::dict t = tensors[pyb::str(key)];
    t["shards"] = t["shards"].cast<int>() + 1;
  }
  pyb::dict objects;
  for (const auto& o : m.objects) {
    pyb::str key(o.meta.key);
    if (!objects.contains(key)) objects[key] = pyb::dict(pyb::arg("grid") = ShapeTuple(o.meta.global_shape), pyb::arg("cells") = 0);
    pyb::dict od = objects[key];
    od["cells"] = od["cells"].cast<int>() + 1;
  }
  d["tensors"] = tensors;
  d["objects"] = objects;
  d["files"] = int(m.files.size());
  d["stored_bytes"] = m.TotalStoredBytes();
  d["tensor_bytes"] = m.TotalTensorBytes();
  return d;
}

}  // namespace ckpt::py
