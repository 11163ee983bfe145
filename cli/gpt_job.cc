#include "cli/gpt_job.h"

#include <cstdarg>
#include <cstdio>

#include "ckpt/checkpoint.h"
#include "reshard/gpt_config_json.h"

namespace ckpt::cli {

Result<std::vector<nlohmann::json>> GptJob::AllGatherJson(const nlohmann::json& mine) {
  CKPT_ASSIGN_OR_RETURN(auto all, comm->AllGather(mine.dump(), Millis(60000), "report"));
  std::vector<nlohmann::json> out;
  for (const auto& s : all) out.push_back(nlohmann::json::parse(s));
  return out;
}

Result<std::unique_ptr<GptJob>> StartGptJob(const std::string& layout_spec, const reshard::GptConfig& model,
                                            const std::string& model_name, bool naive_fc1) {
  auto job = std::make_unique<GptJob>();
  CKPT_ASSIGN_OR_RETURN(job->session, MpiSession::Init(nullptr, nullptr));
  CKPT_ASSIGN_OR_RETURN(job->comm, MpiComm::Create());
  CKPT_ASSIGN_OR_RETURN(job->layout, ParallelConfig::Parse(layout_spec));
  if (job->layout.world_size() != job->comm->size())
    return Status::InvalidArgument("layout " + job->layout.ToString() + " needs " +
                                   std::to_string(job->layout.world_size()) + " ranks, but the job has " +
                                   std::to_string(job->comm->size()) + " (mpirun -np " +
                                   std::to_string(job->layout.world_size()) + ")");
  CKPT_ASSIGN_OR_RETURN(job->coords, CoordsOf(job->layout, job->comm->rank()));
  job->model = model;
  job->model_name = model_name;
  const std::string where = "rank " + std::to_string(job->rank());
  auto shards = reshard::GptShards(model, job->layout, job->coords);
  if (!shards.ok()) return shards.status().WithContext(where);
  auto registered = naive_fc1 ? reshard::NaiveFc1Shards(model, job->layout, job->coords) : shards;
  if (!registered.ok()) return registered.status().WithContext(where);
  job->registered = std::move(registered).value();
  CKPT_ASSIGN_OR_RETURN(auto state, reshard::GptLocalState::Create(std::move(shards).value()));
  job->state = std::make_unique<reshard::GptLocalState>(std::move(state));
  return job;
}

namespace {

// "<base>:tied_embeddings=true,first_stage_layers=3": overrides on a config,
// each value parsed as a JSON scalar (true, 3, "bf16" or bare bf16).
Result<reshard::GptConfig> WithOverrides(const reshard::GptConfig& base, const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return base;
  nlohmann::json j = reshard::GptConfigToJson(base);
  std::string rest = spec.substr(colon + 1);
  size_t pos = 0;
  while (pos < rest.size()) {
    size_t comma = rest.find(',', pos);
    std::string kv = rest.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? rest.size() : comma + 1;
    size_t eq = kv.find('=');
    if (eq == std::string::npos || !j.contains(kv.substr(0, eq)))
      return Status::InvalidArgument("bad model override '" + kv + "' (known keys: " + j.dump() + ")");
    const std::string value = kv.substr(eq + 1);
    nlohmann::json v = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
    j[kv.substr(0, eq)] = v.is_discarded() ? nlohmann::json(value) : v;
  }
  return reshard::GptConfigFromJson(j);
}

}  // namespace

Result<reshard::GptConfig> ResolveModel(const std::string& model, const std::string& root, int64_t iteration,
                                        std::string* name) {
  if (!model.empty() && model.front() != '{' && model.front() != ':') {
    *name = model.substr(0, model.find(':'));
    CKPT_ASSIGN_OR_RETURN(reshard::GptConfig base, reshard::GptPreset(*name));
    return WithOverrides(base, model);
  }
  if (!model.empty() && model.front() == '{') {
    *name = "custom";
    try {
      return reshard::GptConfigFromJson(nlohmann::json::parse(model));
    } catch (const std::exception& e) {
      return Status::InvalidArgument(std::string("--model is neither a preset nor JSON: ") + e.what());
    }
  }
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(DefaultEnv(), root, iteration));
  if (!m.metadata.contains("gpt"))
    return Status::InvalidArgument("checkpoint under '" + root + "' records no GPT config; pass --model");
  *name = m.metadata.value("model", std::string("custom"));
  CKPT_ASSIGN_OR_RETURN(reshard::GptConfig saved, reshard::GptConfigFromJson(m.metadata["gpt"]));
  return WithOverrides(saved, model);  // ":k=v,..." adjusts the saved config
}

void Print0(const GptJob& job, const char* fmt, ...) {
  if (job.rank() != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stdout, fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

}  // namespace ckpt::cli
