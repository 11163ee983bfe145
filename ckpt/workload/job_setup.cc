// JobLayout, JobCoords, ResolveModel: see job_setup.h.
#include "ckpt/workload/job_setup.h"

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/commit.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_family.h"

namespace ckpt::workload {

Result<ParallelConfig> JobLayout(const std::string& layout_spec, const Comm& comm) {
  CKPT_ASSIGN_OR_RETURN(ParallelConfig layout, ParallelConfig::Parse(layout_spec));
  // DP not given (the default "tp=1" under mpirun -np 2): the ranks the other
  // sizes leave are data parallel, as in Megatron (dp = world / (tp*pp*cp)).
  const int model_ranks = layout.tp * layout.pp * layout.cp;
  const bool dp_given = layout_spec.find("dp") != std::string::npos;
  std::string why;
  if (!dp_given && layout.world_size() != comm.size()) {
    if (comm.size() % model_ranks == 0) {
      ParallelConfig with_dp = layout;
      with_dp.dp = comm.size() / model_ranks;
      Status valid = with_dp.Validate();
      if (valid.ok()) return with_dp;
      why = "; dp = world / (tp*pp*cp) = " + std::to_string(with_dp.dp) + " is not valid: " + valid.message();
    } else {
      why = "; dp = world / (tp*pp*cp) is not whole: " + std::to_string(comm.size()) + " ranks, tp*pp*cp = " +
            std::to_string(model_ranks);
    }
  }
  if (layout.world_size() != comm.size())
    return Status::InvalidArgument("layout " + layout.ToString() + " needs " + std::to_string(layout.world_size()) +
                                   " ranks, but the job has " + std::to_string(comm.size()) + " (mpirun -np " +
                                   std::to_string(layout.world_size()) + ")" + why);
  return layout;
}

Result<RankCoords> JobCoords(const ParallelConfig& layout, const Comm& comm) {
  if (layout.world_size() != comm.size())
    return Status::InvalidArgument("layout " + layout.ToString() + " needs " + std::to_string(layout.world_size()) +
                                   " ranks, but the job has " + std::to_string(comm.size()));
  return CoordsOf(layout, comm.rank());
}

namespace {

// "<base>:tied_embeddings=true,first_stage_layers=3": overrides on a config,
// each value parsed as a JSON scalar (true, 3, "bf16" or bare bf16).
Result<reshard::GptConfig> WithOverrides(const reshard::GptConfig& base, const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return base;
  nlohmann::json j = reshard::GptConfigToJson(base);
  const std::string rest = spec.substr(colon + 1);
  size_t pos = 0;
  while (pos < rest.size()) {
    const size_t comma = rest.find(',', pos);
    const std::string kv = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? rest.size() : comma + 1;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || !j.contains(kv.substr(0, eq)))
      return Status::InvalidArgument("bad model override '" + kv + "' (known keys: " + j.dump() + ")");
    const std::string value = kv.substr(eq + 1);
    nlohmann::json v = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    j[kv.substr(0, eq)] = v.is_discarded() ? nlohmann::json(value) : v;
  }
  return reshard::GptConfigFromJson(j);
}

}  // namespace

Result<Manifest> ReadManifestOrOlder(const std::string& root, int64_t iteration) {
  CKPT_ASSIGN_OR_RETURN(auto storage, OpenRoot(nullptr, root));  // any URL, through its backend
  Storage* s = storage.get();
  Result<Manifest> read = ReadManifest(s, iteration);
  if (read.ok()) return read;
  // Removed since it was resolved (retention after a newer commit): the root
  // moved on, so the new latest describes the run.
  if (iteration >= 0 && !IterationPresent(s, iteration))
    if (Result<Manifest> latest = ReadManifest(s, -1); latest.ok()) return latest;
  auto iters = ListIterations(s);
  if (!iters.ok()) return read;
  for (auto it = iters->rbegin(); it != iters->rend(); ++it)
    if (iteration < 0 || *it < iteration)
      if (auto m = ReadManifest(s, *it); m.ok()) return m;
  return read;
}

namespace {

// The layer-norm key style of the checkpoint already under `root`, if any. The
// keys are a naming choice of the stored tensors, not part of the model, so a
// job given a model resumes a checkpoint written before MCore's norm keys
// became the default (legacy names: the alias on load) and keeps its names.
reshard::GptConfig WithSavedNormKeys(reshard::GptConfig cfg, const std::string& root, int64_t iteration) {
  if (root.empty()) return cfg;
  Result<Manifest> m = ReadManifestOrOlder(root, iteration);
  if (!m.ok()) return cfg;  // a fresh root
  auto saved = reshard::RecordedGptConfig(m->metadata, "the layer-norm key style");
  if (saved.ok() && saved->has_value()) cfg.norm_keys = (*saved)->norm_keys;
  return cfg;
}

}  // namespace

Result<reshard::GptConfig> ResolveModel(const std::string& model, const std::string& root, int64_t iteration,
                                        std::string* name) {
  if (!model.empty() && model.front() != '{' && model.front() != ':') {
    *name = model.substr(0, model.find(':'));
    CKPT_ASSIGN_OR_RETURN(reshard::GptConfig base, reshard::GptPreset(*name));
    return WithOverrides(WithSavedNormKeys(base, root, iteration), model);  // ":norm_keys=" still wins
  }
  if (!model.empty() && model.front() == '{') {
    *name = "custom";
    nlohmann::json j = nlohmann::json::parse(model, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return Status::InvalidArgument("--model is neither a preset nor JSON: '" + model + "'");
    // A config the user writes means MCore's keys unless it names a style
    // (only recorded metadata without the field is legacy).
    if (j.is_object() && !j.contains("norm_keys"))
      j["norm_keys"] = reshard::NormKeysName(WithSavedNormKeys(reshard::GptConfig{}, root, iteration).norm_keys);
    return reshard::GptConfigFromJson(j);
  }
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifestOrOlder(root, iteration));
  // The metadata is untrusted (ParseManifest checked only that it is an object).
  CKPT_ASSIGN_OR_RETURN(std::optional<reshard::GptConfig> saved, reshard::RecordedGptConfig(m.metadata, "--model"));
  if (!saved) return Status::InvalidArgument("checkpoint under '" + root + "' records no model config; pass --model");
  if (m.metadata.contains("model") && !m.metadata["model"].is_string() && !m.metadata["model"].is_object())
    return Status::InvalidArgument("checkpoint metadata.model must be a name or an object, not " +
                                   m.metadata["model"].dump().substr(0, 80));
  *name = reshard::RecordedModelName(m.metadata);
  CKPT_ASSIGN_OR_RETURN(double model_bytes, reshard::GptModelBytes(*saved));
  // Generous (registration details, padding), yet far below a 10^6-layer bomb.
  if (model_bytes > 4.0 * double(m.TotalTensorBytes()) + double(int64_t(64) << 20))
    return Status::InvalidArgument("checkpoint metadata model config describes " + std::to_string(int64_t(model_bytes / 1e6)) +
                                   " MB of parameters, but iteration " + std::to_string(m.iteration) + " holds " +
                                   std::to_string(m.TotalTensorBytes() / 1000000) + " MB of tensors: refusing it");
  return WithOverrides(*saved, model);  // ":k=v,..." adjusts the saved config
}

}  // namespace ckpt::workload
