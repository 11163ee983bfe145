// The model-family seam: what ckpt needs to know about one kind of model
// (its layout rules), behind one interface, so that the generic layers
// (fingerprint, offline tools, workload) do not name a model.
//
// A family turns a JSON model config plus a parallel layout into the
// ShardedTensor descriptors of one rank (ModelShards), and says which part of
// a saved tensor is layout-invariant state (CanonicalRows: a vocabulary padded
// per TP is canonically its unpadded rows). Configs travel as JSON in the
// manifest metadata:
//   "model": {"family": "<name>", "config": {...}}
// Checkpoints written before the seam record no family; their metadata "gpt"
// (reshard/gpt_config_json.h), when an object, means family "megatron_gpt"
// with that config (and their "model" is the preset's name, a string).
//
// Registry: "megatron_gpt" (reshard/megatron_family.h) is built in; another
// family is one RegisterModelFamily call. Registration and lookup are
// thread-safe; a registered family lives until exit and must be thread-safe
// (families are stateless: pure functions of their arguments).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "ckpt/base/sharded_tensor.h"
#include "ckpt/base/status.h"
#include "reshard/parallel_state.h"

namespace ckpt::reshard {

// One registered ShardedTensor and the rank-local parameter that holds its data.
struct ModelShard {
  ShardedTensor tensor;
  std::string param;         // rank-local parameter name, unique per rank
  Shape param_shape;         // shape of that local parameter tensor
  int64_t param_offset = 0;  // element offset of tensor's data inside the parameter
  // The "<module>._extra_state" object of the module owning this tensor, if
  // the family registers one (on the module's first shard only).
  std::optional<ShardedObject> extra_state;
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  // Registry key and the "family" value in metadata, e.g. "megatron_gpt".
  virtual std::string_view name() const = 0;
  // The config in canonical JSON form (defaults filled, fields checked):
  // config from and to JSON in one step. kInvalidArgument naming the field.
  virtual Result<nlohmann::json> ParseConfig(const nlohmann::json& config) const = 0;
  // Every ShardedTensor of the rank at `coords` of layout `pc`, in module order.
  virtual Result<std::vector<ModelShard>> Shards(const nlohmann::json& config, const ParallelConfig& pc,
                                                 const RankCoords& coords) const = 0;
  // Leading rows (axis 0) of saved tensor `t` that are model state whatever
  // the layout; -1: all of it. Only asked for allow_shape_mismatch tensors.
  virtual int64_t CanonicalRows(const nlohmann::json& config, const ShardedTensor& t) const = 0;

  Status Validate(const nlohmann::json& config) const { return ParseConfig(config).status(); }
};

// kAlreadyExists if a family of that name is registered; kInvalidArgument on null / empty name.
Status RegisterModelFamily(std::shared_ptr<const ModelFamily> family);
// nullptr if none is registered under `name`.
const ModelFamily* FindModelFamily(std::string_view name);
std::vector<std::string> ModelFamilyNames();  // sorted

// A checkpoint's model: its family and (canonical) config.
struct ModelRef {
  const ModelFamily* family = nullptr;
  nlohmann::json config;
};

// The model recorded in manifest metadata (see above); nullopt when none is
// recorded. kNotFound for an unregistered family (naming it and the
// registered ones); the family's kInvalidArgument for a bad config.
Result<std::optional<ModelRef>> ModelOf(const nlohmann::json& metadata);
// {"family": family.name(), "config": config} for a manifest's "model" key.
nlohmann::json ModelMetadata(const ModelFamily& family, const nlohmann::json& config);

}  // namespace ckpt::reshard
