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
  auto shards = naive_fc1 ? reshard::NaiveFc1Shards(model, job->layout, job->coords)
                          : reshard::GptShards(model, job->layout, job->coords);
  if (!shards.ok()) return shards.status().WithContext("rank " + std::to_string(job->rank()));
  CKPT_ASSIGN_OR_RETURN(auto state, reshard::GptLocalState::Create(std::move(shards).value()));
  job->state = std::make_unique<reshard::GptLocalState>(std::move(state));
  return job;
}

Result<reshard::GptConfig> ResolveModel(const std::string& model, const std::string& root, int64_t iteration,
                                        std::string* name) {
  if (!model.empty() && model.front() != '{') {
    *name = model;
    return reshard::GptPreset(model);
  }
  if (!model.empty()) {
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
  return reshard::GptConfigFromJson(m.metadata["gpt"]);
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
