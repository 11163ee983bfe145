// ckpt._ckpt model families: configs cross as JSON text (the form recorded in
// a manifest's metadata), descriptors come back as plain dicts; errors raise
// ckpt.CkptError subclasses (InvalidArgumentError naming the field).
#include "py_family.h"

#include <pybind11/stl.h>

#include "py_state.h"
#include "reshard/family.h"

namespace ckpt::py {
namespace {

const reshard::ModelFamily& Family(const std::string& name) {
  const reshard::ModelFamily* f = reshard::FindModelFamily(name);
  if (!f) Check(Status::NotFound("model family '" + name + "' is not registered"), 0, "model_shards");
  return *f;
}

nlohmann::json ParseJson(const std::string& text, const std::string& op) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) Check(Status::InvalidArgument(op + ": config is not JSON"), 0, op);
  return j;
}

pyb::tuple Tuple(const Shape& s) { return pyb::cast(std::vector<int64_t>(s.begin(), s.end())); }

pyb::dict ShardDict(const reshard::ModelShard& s) {
  pyb::dict d;
  d["key"] = s.tensor.key;
  d["dtype"] = std::string(DTypeName(s.tensor.dtype));
  d["global_shape"] = Tuple(s.tensor.global_shape);
  d["global_offset"] = Tuple(s.tensor.global_offset);
  d["local_shape"] = Tuple(s.tensor.local_shape);
  d["replica_id"] = pyb::cast(std::vector<int32_t>(s.tensor.replica_id.begin(), s.tensor.replica_id.end()));
  d["allow_shape_mismatch"] = s.tensor.allow_shape_mismatch;
  d["param"] = s.param;
  d["param_shape"] = Tuple(s.param_shape);
  d["param_offset"] = s.param_offset;
  d["extra_state"] = s.extra_state ? pyb::object(pyb::str(s.extra_state->key)) : pyb::none();
  return d;
}

// Descriptors of `rank` of layout `layout` ("tp=2,pp=2,...") for a config (JSON text).
pyb::list ModelShards(const std::string& family, const std::string& config, const std::string& layout, int rank) {
  const reshard::ModelFamily& f = Family(family);
  const ParallelConfig pc = Value(ParallelConfig::Parse(layout), rank, "model_shards");
  const RankCoords c = Value(CoordsOf(pc, rank), rank, "model_shards");
  pyb::list out;
  for (const auto& s : Value(f.Shards(ParseJson(config, "model_shards"), pc, c), rank, "model_shards"))
    out.append(ShardDict(s));
  return out;
}

// The family's canonical config (defaults filled) as JSON text.
std::string ModelConfig(const std::string& family, const std::string& config) {
  return Value(Family(family).ParseConfig(ParseJson(config, "model_config")), 0, "model_config").dump();
}

}  // namespace

void DefineFamily(pyb::module_& m) {
  m.def("model_families", &reshard::ModelFamilyNames);
  m.def("model_shards", &ModelShards);
  m.def("model_config", &ModelConfig);
}

}  // namespace ckpt::py
