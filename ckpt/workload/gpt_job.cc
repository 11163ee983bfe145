#include "ckpt/workload/gpt_job.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <string_view>

#include "ckpt/base/agree.h"
#include "ckpt/protocol/checkpoint.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_moe.h"
#include "ckpt/workload/gpt_local_state.h"
#include "ckpt/workload/dist_optimizer_state.h"
#include "ckpt/workload/job_setup.h"
#include "ckpt/workload/rank_report.h"

namespace ckpt::workload {

Result<std::vector<nlohmann::json>> GptJob::AllGatherJson(const nlohmann::json& mine) {
  return workload::AllGatherJson(*comm, mine, timeout, Phase::kReport);
}

Result<ShardedStateDict> GptJob::StateDict() {
  CKPT_ASSIGN_OR_RETURN(ShardedStateDict sd, state->StateDictFor(registered));
  if (!optimizer) return sd;
  ShardedStateDict opt = optimizer->StateDict(*optimizer_spec.format);
  for (auto& t : opt.tensors()) sd.AddTensor(std::move(t.meta), t.data);
  for (auto& o : opt.objects()) sd.AddObject(std::move(o.meta), std::move(o.bytes));
  return sd;
}

Status GptJob::FillExpected() {
  CKPT_RETURN_IF_ERROR(state->FillExpected(model.vocab_size));
  return optimizer ? optimizer->FillExpected(model.vocab_size) : Status::Ok();
}

Result<int64_t> GptJob::CountMismatches(std::string* first_bad, int64_t* optimizer_bad) const {
  CKPT_ASSIGN_OR_RETURN(int64_t bad, state->CountMismatches(model.vocab_size, first_bad));
  int64_t opt_bad = 0;
  if (optimizer) {
    std::string where;
    CKPT_ASSIGN_OR_RETURN(opt_bad, optimizer->CountMismatches(model.vocab_size, &where));
    if (bad == 0 && opt_bad > 0 && first_bad) *first_bad = where;
  }
  if (optimizer_bad) *optimizer_bad = opt_bad;
  return bad + opt_bad;
}

int64_t GptJob::StateBytes() const {
  return state->TotalBytes() + (optimizer ? optimizer->TotalBytes() : 0);
}

namespace {

// MemAvailable of /proc/meminfo over the local ranks, in bytes (-1: unknown).
int64_t AvailablePerLocalRank() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kb = -1;
  while (in >> key) {
    if (key == "MemAvailable:") {
      in >> kb;
      break;
    }
    in.ignore(1 << 10, '\n');
  }
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return kb < 0 ? -1 : kb * 1024 / std::max(1, local ? std::atoi(local) : 1);
}

// Refuses a state this rank cannot hold (a simulation preset such as
// llama70b) before allocating it, instead of dying of bad_alloc.
Status CheckStateFits(const std::string& name, const std::vector<reshard::GptShard>& shards, bool optimizer) {
  double bytes = 0;
  for (const auto& s : shards)
    bytes += double(s.tensor.num_elements()) * (double(DTypeSize(s.tensor.dtype)) + (optimizer ? 12.0 : 0.0));
  const int64_t avail = AvailablePerLocalRank();
  if (avail < 0 || bytes <= 0.8 * double(avail)) return Status::Ok();
  const bool sim = name == "llama70b" || name == "llama405b";
  return Status::InvalidArgument("model '" + name + "' needs " + std::to_string(int64_t(bytes / 1e9)) +
                                 " GB of state on this rank, " + std::to_string(avail / 1000000000) +
                                 " GB available" + (sim ? ": it is a simulation-only preset (use ckpt plan --simulate)" : ""));
}

}  // namespace

Result<std::unique_ptr<GptJob>> StartGptJob(const std::string& layout_spec, const reshard::GptConfig& model,
                                            const std::string& model_name, const OptimizerSpec& optimizer) {
  auto job = std::make_unique<GptJob>();
  CKPT_ASSIGN_OR_RETURN(job->session, MpiSession::Init(nullptr, nullptr));
  CKPT_ASSIGN_OR_RETURN(job->comm, MpiComm::Create());
  CKPT_ASSIGN_OR_RETURN(job->layout, workload::JobLayout(layout_spec, *job->comm));
  CKPT_ASSIGN_OR_RETURN(job->coords, workload::JobCoords(job->layout, *job->comm));
  job->model = model;
  job->model_name = model_name;
  const std::string where = "rank " + std::to_string(job->rank());
  auto shards = reshard::GptShards(model, job->layout, job->coords);
  if (!shards.ok()) return shards.status().WithContext(where);
  job->registered = *shards;
  job->optimizer_spec = optimizer;
  if (optimizer.format) {
    auto opt = workload::DistOptimizerState::Create(model, job->layout, job->coords, *shards,
                                                   {optimizer.bucket_elems});
    if (!opt.ok()) return opt.status().WithContext(where);
    job->optimizer = std::make_unique<workload::DistOptimizerState>(std::move(opt).value());
  }
  CKPT_RETURN_IF_ERROR(CheckStateFits(model_name, *shards, optimizer.format.has_value()).WithContext(where));
  CKPT_ASSIGN_OR_RETURN(auto state, workload::GptLocalState::Create(std::move(shards).value()));
  job->state = std::make_unique<workload::GptLocalState>(std::move(state));
  return job;
}

Result<OptimizerSpec> SaveOptimizerSpec(const std::string& flag, int64_t bucket_elems) {
  OptimizerSpec spec;
  spec.bucket_elems = std::max<int64_t>(bucket_elems, 0);
  if (flag == "none") return spec;
  CKPT_ASSIGN_OR_RETURN(spec.format, reshard::ParseOptimizerFormat(flag));
  return spec;
}

nlohmann::json OptimizerMetadata(const OptimizerSpec& spec) {
  if (!spec.format) return nullptr;
  return {{"format", std::string(reshard::OptimizerFormatName(*spec.format))},
          {"bucket_elems", spec.bucket_elems},
          {"states", reshard::AdamStateNames(*spec.format)}};
}

Result<OptimizerSpec> LoadOptimizerSpec(const std::string& flag, int64_t bucket_elems,
                                        const nlohmann::json& metadata) {
  OptimizerSpec spec;
  const nlohmann::json saved = metadata.is_object() ? metadata.value("optimizer", nlohmann::json()) : nullptr;
  const bool has = saved.is_object() && saved.contains("format");
  if (has && (!saved["format"].is_string() || (saved.contains("bucket_elems") && !saved["bucket_elems"].is_number_integer())))
    return Status::InvalidArgument("checkpoint metadata.optimizer is malformed: " + saved.dump().substr(0, 120));
  spec.bucket_elems = bucket_elems >= 0 ? bucket_elems : has ? saved.value("bucket_elems", int64_t{0}) : 0;
  if (flag == "none" || (flag == "auto" && !has)) return spec;
  if (!has)
    return Status::FailedPrecondition("the checkpoint holds no optimizer state (it was saved with "
                                      "--optimizer none); load it with --optimizer none");
  CKPT_ASSIGN_OR_RETURN(reshard::OptimizerFormat saved_format,
                        reshard::ParseOptimizerFormat(saved["format"].get<std::string>()));
  if (flag != "auto") {
    CKPT_ASSIGN_OR_RETURN(reshard::OptimizerFormat want, reshard::ParseOptimizerFormat(flag));
    if (want != saved_format)
      return Status::FailedPrecondition(
          saved_format == reshard::OptimizerFormat::kModelSpace
              ? "the checkpoint holds model-space optimizer state; load it with --optimizer model "
                "(it reshards to any layout)"
              : "the checkpoint holds bucket-space optimizer state; it loads only with --optimizer "
                "bucket into the same bucket layout (save in model space, --optimizer model, to "
                "reshard)");
  }
  spec.format = saved_format;
  return spec;
}

Status PrecheckBucketLayout(GptJob& job, const std::string& root, int64_t iteration) {
  ShardedStateDict request = job.optimizer->BucketLayoutRequest();
  ShardedStateDict found;
  Status st = Status::Ok();
  for (const auto& want : request.objects()) {  // one by one: a missing one is not an error yet
    ShardedStateDict one;
    one.AddObject(want.meta);
    LoadOptions o;
    o.root = root;
    o.iteration = iteration;
    auto r = LoadCheckpoint(one, o);
    if (r.ok()) {
      found.AddObject(one.objects()[0].meta, std::move(one.objects()[0].bytes));
    } else if (r.status().code() != Code::kNotFound) {
      st = r.status();
      break;
    }
  }
  if (st.ok()) st = job.optimizer->CheckBucketLayout(found);
  // Every rank gets the first failing rank's explanation ("rank <r>: ...").
  const Status mine = st.ok() ? st : Status(Code::kFailedPrecondition, st.message(), job.rank(), Phase::kBucketLayout);
  return AgreeStatus(job.comm.get(), mine, Phase::kBucketLayout, job.timeout);
}

int64_t ResolveLoadIteration(const std::string& root, int64_t iteration) {
  if (iteration >= 0) return iteration;
  Result<int64_t> latest = LatestIteration(nullptr, root);
  return latest.ok() ? *latest : -1;
}

namespace {

int64_t StatusField(std::string_view field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0 && line.size() > field.size() && line[field.size()] == ':')
      return std::stoll(line.substr(field.size() + 1)) * 1024;  // "VmRSS:   1234 kB"
  return -1;
}

}  // namespace

int64_t LargestShard(const ShardedStateDict& sd) {
  int64_t mx = 0;
  for (const auto& t : sd.tensors()) mx = std::max(mx, t.meta.num_bytes());
  return mx;
}

int64_t LargestChunk(const Manifest& m) {
  int64_t mx = 0;
  for (const auto& s : m.shards)
    mx = std::max(mx, std::min(s.record.chunk_elems, s.meta.num_elements()) * int64_t(DTypeSize(s.meta.dtype)));
  return mx;
}

bool MemoryProbe::ResetPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";  // Linux >= 4.0: reset the peak RSS to the current RSS
  out.close();
  return bool(out);
}

int64_t MemoryProbe::Rss() const { return StatusField("VmRSS"); }
int64_t MemoryProbe::Peak() const { return StatusField("VmHWM"); }

}  // namespace ckpt::workload
