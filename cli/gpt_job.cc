#include "cli/gpt_job.h"

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <string_view>

#include "ckpt/protocol/checkpoint.h"
#include "cli/commands.h"
#include "reshard/gpt_config_json.h"
#include "reshard/megatron_moe.h"
#include "ckpt/workload/gpt_local_state.h"
#include "ckpt/workload/dist_optimizer_state.h"
#include "tests/testing/negative_controls.h"

namespace ckpt::cli {

Result<std::vector<nlohmann::json>> GptJob::AllGatherJson(const nlohmann::json& mine) {
  CKPT_ASSIGN_OR_RETURN(auto all, comm->AllGather(mine.dump(), timeout, "report"));
  std::vector<nlohmann::json> out;
  for (const auto& s : all) out.push_back(nlohmann::json::parse(s));
  return out;
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

nlohmann::json ModelToJson(const reshard::GptConfig& cfg) { return reshard::GptConfigToJson(cfg); }

namespace {

Result<reshard::GptConfig> ModelFromJson(const nlohmann::json& j) { return reshard::GptConfigFromJson(j); }

}  // namespace

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
                                            const std::string& model_name, bool naive_fc1,
                                            const OptimizerSpec& optimizer) {
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
  auto registered = naive_fc1 ? testing::NaiveFc1Shards(model, job->layout, job->coords) : shards;
  if (!registered.ok()) return registered.status().WithContext(where);
  job->registered = std::move(registered).value();
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

namespace {

// "<base>:tied_embeddings=true,first_stage_layers=3": overrides on a config,
// each value parsed as a JSON scalar (true, 3, "bf16" or bare bf16).
Result<reshard::GptConfig> WithOverrides(const reshard::GptConfig& base, const std::string& spec) {
  const size_t colon = spec.find(':');
  if (colon == std::string::npos) return base;
  nlohmann::json j = ModelToJson(base);
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
  return ModelFromJson(j);
}

}  // namespace

Result<Manifest> ReadManifestOrOlder(const std::string& root, int64_t iteration) {
  Result<Manifest> read = ReadManifest(DefaultEnv(), root, iteration);
  if (read.ok()) return read;
  auto iters = ListIterations(DefaultEnv(), root);
  if (!iters.ok()) return read;
  for (auto it = iters->rbegin(); it != iters->rend(); ++it)
    if (iteration < 0 || *it < iteration)
      if (auto m = ReadManifest(DefaultEnv(), root, *it); m.ok()) return m;
  return read;
}

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
      return ModelFromJson(nlohmann::json::parse(model));
    } catch (const std::exception& e) {
      return Status::InvalidArgument(std::string("--model is neither a preset nor JSON: ") + e.what());
    }
  }
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifestOrOlder(root, iteration));
  if (!m.metadata.contains("gpt"))
    return Status::InvalidArgument("checkpoint under '" + root + "' records no GPT config; pass --model");
  // The metadata is untrusted (ParseManifest checked only that it is an object).
  const nlohmann::json& model_name = m.metadata.contains("model") ? m.metadata["model"] : nlohmann::json("custom");
  if (!model_name.is_string())
    return Status::InvalidArgument("checkpoint metadata.model must be a string, not " + model_name.dump().substr(0, 80));
  *name = model_name.get<std::string>();
  auto saved = ModelFromJson(m.metadata["gpt"]);
  if (!saved.ok()) return saved.status().WithContext("checkpoint metadata.gpt");
  CKPT_ASSIGN_OR_RETURN(double model_bytes, reshard::GptModelBytes(*saved));
  // Generous (registration details, padding), yet far below a 10^6-layer bomb.
  if (model_bytes > 4.0 * double(m.TotalTensorBytes()) + double(int64_t(64) << 20))
    return Status::InvalidArgument("checkpoint metadata.gpt describes " + std::to_string(int64_t(model_bytes / 1e6)) +
                                   " MB of parameters, but iteration " + std::to_string(m.iteration) + " holds " +
                                   std::to_string(m.TotalTensorBytes() / 1000000) + " MB of tensors: refusing it");
  return WithOverrides(*saved, model);  // ":k=v,..." adjusts the saved config
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
  const std::string mine = st.ok() ? "" : st.message() + " [found on rank " + std::to_string(job.rank()) + "]";
  CKPT_ASSIGN_OR_RETURN(auto all, job.AllGatherJson(mine));
  for (const auto& a : all)
    if (!a.get<std::string>().empty()) return Status::FailedPrecondition(a.get<std::string>());
  return Status::Ok();
}

int64_t ResolveLoadIteration(const std::string& root, int64_t iteration) {
  if (iteration >= 0) return iteration;
  Result<int64_t> latest = LatestIteration(DefaultEnv(), root);
  return latest.ok() ? *latest : -1;
}

namespace {

// Whose failure a load Status is, and whether it is damage.
struct LoadFailure {
  int rank;
  bool damage;
};

// "... failed on rank N: <CodeName>: ..." (the loader's Aborted for another
// rank's failure) names rank N; any other failure is this rank's own.
LoadFailure FailureOf(const Status& st, int me) {
  constexpr std::string_view kOn = "failed on rank ";
  const std::string& m = st.message();
  size_t pos = m.find(kOn);
  if (st.code() != Code::kAborted || pos == std::string::npos) return {me, st.code() == Code::kCorruption};
  pos += kOn.size();
  size_t end = pos;
  while (end < m.size() && m[end] >= '0' && m[end] <= '9' && end - pos < 9) ++end;
  if (end == pos || m.compare(end, 2, ": ") != 0) return {me, false};
  const std::string damage = std::string(CodeName(Code::kCorruption)) + ":";
  return {std::stoi(m.substr(pos, end - pos)), m.compare(end + 2, damage.size(), damage) == 0};
}

int ExitCodeOf(bool damage) { return damage ? kExitCheckFailed : kExitError; }

}  // namespace

int AgreedLoadExitCode(Comm* comm, const Status& st, Millis timeout) {
  const LoadFailure mine = FailureOf(st, comm ? comm->rank() : 0);
  if (!comm || comm->size() == 1 || st.code() == Code::kTimeout) return ExitCodeOf(mine.damage);
  auto all = comm->AllGather(std::to_string(mine.rank) + (mine.damage ? ":1" : ":0"), timeout, "exit code");
  if (!all.ok()) return ExitCodeOf(mine.damage);
  LoadFailure first{INT32_MAX, false};
  for (const std::string& a : *all) {
    const size_t colon = a.find(':');
    if (colon == std::string::npos || colon == 0) continue;
    const LoadFailure f{std::atoi(a.substr(0, colon).c_str()), a.substr(colon + 1) == "1"};
    if (f.rank < first.rank) first = f;
    else if (f.rank == first.rank) first.damage = first.damage || f.damage;
  }
  return ExitCodeOf(first.damage);
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

bool MemoryProbe::ResetPeak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";  // Linux >= 4.0: reset the peak RSS to the current RSS
  out.close();
  return bool(out);
}

int64_t MemoryProbe::Rss() const { return StatusField("VmRSS"); }
int64_t MemoryProbe::Peak() const { return StatusField("VmHWM"); }

void Print0(const GptJob& job, const char* fmt, ...) {
  if (job.rank() != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vfprintf(stdout, fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

}  // namespace ckpt::cli
