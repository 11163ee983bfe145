#include "faults/oracle.h"

#include "reshard/parallel_state.h"
#include "ckpt/workload/expected_values.h"
#include "ckpt/workload/gpt_local_state.h"

namespace ckpt::faults {

std::string TaggedKey(const std::string& key, int64_t iteration) { return key + "#it" + std::to_string(iteration); }

Status FillForIteration(workload::GptLocalState& state, int64_t vocab_size, int64_t iteration) {
  for (size_t i = 0; i < state.shards().size(); ++i) {
    ShardedTensor t = state.shards()[i].tensor;
    t.key = TaggedKey(t.key, iteration);
    CKPT_RETURN_IF_ERROR(workload::FillExpected(t, state.ShardData(i), vocab_size));
  }
  return Status::Ok();
}

Result<int64_t> MismatchesForIteration(const workload::GptLocalState& state, int64_t vocab_size, int64_t iteration,
                                       std::string* first_bad) {
  int64_t total = 0;
  for (size_t i = 0; i < state.shards().size(); ++i) {
    ShardedTensor t = state.shards()[i].tensor;
    const std::string key = t.key;
    t.key = TaggedKey(key, iteration);
    int64_t first = -1;
    CKPT_ASSIGN_OR_RETURN(int64_t bad, workload::CountMismatches(t, state.ShardView(i), &first, vocab_size));
    if (bad > 0 && total == 0 && first_bad) *first_bad = key + " element " + std::to_string(first);
    total += bad;
  }
  return total;
}

Result<std::unique_ptr<workload::GptLocalState>> LocalGptState(const reshard::GptConfig& model, const std::string& layout) {
  CKPT_ASSIGN_OR_RETURN(ParallelConfig pc, ParallelConfig::Parse(layout));
  if (pc.world_size() != 1) return Status::InvalidArgument("layout " + layout + " is not a single rank");
  CKPT_ASSIGN_OR_RETURN(RankCoords coords, CoordsOf(pc, 0));
  CKPT_ASSIGN_OR_RETURN(auto shards, reshard::GptShards(model, pc, coords));
  CKPT_ASSIGN_OR_RETURN(auto state, workload::GptLocalState::Create(std::move(shards)));
  return std::make_unique<workload::GptLocalState>(std::move(state));
}

nlohmann::json LoadVerdict(const Result<LoadStats>& r, const workload::GptLocalState& state, int64_t vocab_size) {
  if (!r.ok()) return {{"ok", false}, {"error", r.status().ToString()}};
  std::string first_bad;
  auto bad = MismatchesForIteration(state, vocab_size, r->iteration, &first_bad);
  if (!bad.ok()) return {{"ok", false}, {"error", bad.status().ToString()}};
  return {{"ok", true}, {"iteration", r->iteration}, {"mismatches", *bad}, {"first_bad", first_bad},
          {"elements", r->elements + r->zero_filled}, {"skipped", r->skipped}};
}

nlohmann::json MergeLoadVerdicts(const std::vector<nlohmann::json>& all) {
  if (all.empty()) return {{"ok", false}, {"error", "no verdicts"}};
  nlohmann::json out = all.front();
  int64_t bad = 0, elements = 0;
  for (const auto& a : all) {
    if (!a.value("ok", false)) return a;
    bad += a.value("mismatches", int64_t(0));
    elements += a.value("elements", int64_t(0));
    if (out.value("first_bad", std::string()).empty()) out["first_bad"] = a.value("first_bad", std::string());
  }
  out["mismatches"] = bad;
  out["elements"] = elements;
  return out;
}

}  // namespace ckpt::faults
