// TrainWorkload::Resume: strict presence check, load, then the resume state's
// own consistency checks (arguments, progress, step, model vs fp32 params).
#include <map>
#include <set>

#include "ckpt/base/agree.h"
#include "ckpt/workload/rank_report.h"
#include "ckpt/workload/train_keys.h"
#include "ckpt/workload/train_workload.h"

namespace ckpt::workload {
namespace {

// What a missing resume object is, and how to resume without it.
std::string Describe(const std::string& item) {
  if (item.find(std::string("'") + kRng + "'") != std::string::npos)
    return item + " (RNG state; --no-rng-state resumes without it, not bitwise)";
  if (item.find(std::string("'") + kIterator + "'") != std::string::npos)
    return item + " (data iterator state; --no-iterator-state restarts the data order, not bitwise)";
  return item;
}

Result<nlohmann::json> ParseObject(const std::map<std::string, const ObjectEntry*>& objs, const char* key) {
  auto it = objs.find(key);
  if (it == objs.end()) return Status::Internal(std::string("resume object '") + key + "' was not requested");
  const auto& b = it->second->bytes;
  nlohmann::json j = nlohmann::json::parse(reinterpret_cast<const char*>(b.data()),
                                           reinterpret_cast<const char*>(b.data()) + b.size(), nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return Status::Corruption(std::string("resume object '") + key + "' is not a JSON object");
  return j;
}

Result<uint64_t> GetU64(const nlohmann::json& j, const char* field, const char* what) {
  if (!j.contains(field) || !j[field].is_number_integer())
    return Status::Corruption(std::string(what) + " lacks integer field '" + field + "'");
  return j[field].get<uint64_t>();
}

}  // namespace

std::vector<std::string> MissingState(const Manifest& m, const ShardedStateDict& request) {
  std::set<std::string> keys;
  std::set<std::pair<std::string, int64_t>> cells;
  for (const auto& s : m.shards) keys.insert(s.meta.key);
  for (const auto& o : m.objects) cells.insert({o.meta.key, o.meta.cell()});
  std::vector<std::string> missing;
  std::set<std::string> seen;
  auto add = [&](std::string what) {
    if (seen.insert(what).second) missing.push_back(std::move(what));
  };
  for (const auto& t : request.tensors())
    if (!keys.count(t.meta.key)) add("tensor '" + t.meta.key + "'");
  for (const auto& o : request.objects())
    if (!cells.count({o.meta.key, o.meta.cell()}))
      add("object '" + o.meta.key + "' cell " + std::to_string(o.meta.cell()));
  return missing;
}

Status TrainWorkload::Resume(const std::string& root, int64_t iteration, Comm* comm, const ResumeParts& parts,
                             Millis timeout, LoadStats* stats) {
  auto manifest = ReadManifest(nullptr, root, iteration);
  CKPT_RETURN_IF_ERROR(AgreeStatus(comm, manifest.status(), Phase::kResumeManifest, timeout));
  const int64_t iter = manifest->iteration;
  ShardedStateDict request = SaveDict(parts);

  // Strict: the union over ranks of everything missing, reported at once.
  nlohmann::json mine = MissingState(*manifest, request);
  std::vector<std::string> missing;
  if (comm && comm->size() > 1) {
    CKPT_ASSIGN_OR_RETURN(auto all, AllGatherJson(*comm, mine, timeout, Phase::kResumeCheck));
    std::set<std::string> seen;
    for (size_t r = 0; r < all.size(); ++r) {
      if (!all[r].is_array()) return Status::Internal("rank " + std::to_string(r) + " sent a malformed resume check");
      for (const auto& item : all[r]) {
        if (!item.is_string()) return Status::Internal("rank " + std::to_string(r) + " sent a malformed resume check");
        if (seen.insert(item.get<std::string>()).second) missing.push_back(item.get<std::string>());
      }
    }
  } else {
    missing = mine.get<std::vector<std::string>>();
  }
  if (!missing.empty()) {
    std::string list;
    for (size_t i = 0; i < missing.size() && i < 8; ++i) list += (i ? ", " : "") + Describe(missing[i]);
    if (missing.size() > 8) list += " and " + std::to_string(missing.size() - 8) + " more";
    return Status::FailedPrecondition("checkpoint iteration " + std::to_string(iter) + " under '" + root +
                                      "' lacks resume state: " + list);
  }

  LoadOptions lo;
  lo.root = root;
  lo.iteration = iter;
  lo.comm = comm;
  lo.timeout = timeout;
  CKPT_ASSIGN_OR_RETURN(LoadStats ls, LoadCheckpoint(request, lo));
  if (stats) *stats = ls;
  return ApplyLoaded(request, iter, comm, parts, timeout);
}

Status TrainWorkload::ApplyLoaded(const ShardedStateDict& request, int64_t iter, Comm* comm, const ResumeParts& parts,
                                  Millis timeout) {
  Status st = ApplyResumeObjects(request, parts, iter);
  for (size_t p = 0; st.ok() && p < params_.size(); ++p) {
    int64_t bad = -1;
    if (!ModelMatchesMain(p, &bad))
      for (size_t s = 0; s < shards_.size(); ++s)
        if (info_[s].param == p) {
          st = Status::Corruption("model param '" + shards_[s].tensor.key + "' (local element " + std::to_string(bad) +
                                  ") is not the rounding of its fp32 main param");
          break;
        }
  }
  return AgreeStatus(comm, st, Phase::kResumeApply, timeout);
}

Status TrainWorkload::ApplyResumeObjects(const ShardedStateDict& loaded, const ResumeParts& parts, int64_t iteration) {
  std::map<std::string, const ObjectEntry*> objs;
  for (const auto& o : loaded.objects()) objs[o.meta.key] = &o;
  CKPT_ASSIGN_OR_RETURN(nlohmann::json args, ParseObject(objs, kArgs));
  CKPT_RETURN_IF_ERROR(CheckArgs(args, cfg_.ArgsJson()));
  CKPT_ASSIGN_OR_RETURN(nlohmann::json progress, ParseObject(objs, kProgress));
  CKPT_ASSIGN_OR_RETURN(uint64_t it, GetU64(progress, "iteration", kProgress));
  if (int64_t(it) != iteration || step_[0] != iteration)
    return Status::Corruption("checkpoint iteration " + std::to_string(iteration) + " holds progress iteration " +
                              std::to_string(it) + " and optimizer step " + std::to_string(step_[0]));
  CKPT_ASSIGN_OR_RETURN(nlohmann::json lr, ParseObject(objs, kLr));
  CKPT_RETURN_IF_ERROR(lr_.LoadState(lr));

  int64_t consumed = 0;
  ledger_ = {};
  if (parts.data_iterator) {
    CKPT_ASSIGN_OR_RETURN(nlohmann::json j, ParseObject(objs, kIterator));
    CKPT_ASSIGN_OR_RETURN(DataIteratorState ds, DataIteratorState::FromJson(j));
    if (ds.ledger.count != uint64_t(ds.consumed_samples))
      return Status::Corruption("data iterator state: ledger counts " + std::to_string(ds.ledger.count) +
                                " samples, consumed_samples is " + std::to_string(ds.consumed_samples));
    consumed = ds.consumed_samples;
    ledger_ = ds.ledger;
  }
  // The DP slices are recomputed from consumed_samples for this job's dp and micro batch.
  CKPT_ASSIGN_OR_RETURN(auto sampler, PretrainingSampler::Create(sampler_->config(), consumed));
  sampler_.emplace(std::move(sampler));

  rng_ = {cfg_.seed, 0};  // without saved RNG state: a fresh job's stream
  if (parts.rng) {
    CKPT_ASSIGN_OR_RETURN(nlohmann::json j, ParseObject(objs, kRng));
    if (j.value("generator", std::string()) != "philox4x32-10")
      return Status::Corruption("RNG state: unknown generator " + j.value("generator", nlohmann::json()).dump());
    CKPT_ASSIGN_OR_RETURN(rng_.seed, GetU64(j, "seed", kRng));
    CKPT_ASSIGN_OR_RETURN(rng_.offset, GetU64(j, "offset", kRng));
  }
  iteration_ = iteration;
  return Status::Ok();
}

}  // namespace ckpt::workload
