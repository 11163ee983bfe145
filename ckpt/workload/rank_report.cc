// AllGatherJson and the reductions over per-rank reports: see rank_report.h.
#include "ckpt/workload/rank_report.h"

#include <algorithm>
#include <functional>

namespace ckpt::workload {

Result<std::vector<nlohmann::json>> AllGatherJson(Comm& comm, const nlohmann::json& mine, Millis timeout,
                                                  std::string_view phase) {
  CKPT_ASSIGN_OR_RETURN(auto all, comm.AllGather(mine.dump(), timeout, phase));
  std::vector<nlohmann::json> out;
  for (size_t r = 0; r < all.size(); ++r) {
    nlohmann::json j = nlohmann::json::parse(all[r], nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      return Status::Internal("rank " + std::to_string(r) + " sent a malformed report in phase '" +
                              std::string(phase) + "'");
    out.push_back(std::move(j));
  }
  return out;
}

namespace {

Result<int64_t> Reduce(const std::vector<nlohmann::json>& all, const std::string& key,
                       const std::function<int64_t(int64_t, int64_t)>& op) {
  int64_t acc = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    const auto it = all[r].find(key);
    if (it == all[r].end() || !it->is_number_integer())
      return Status::InvalidArgument("the report of rank " + std::to_string(r) + " has no integer '" + key + "'");
    acc = r == 0 ? it->get<int64_t>() : op(acc, it->get<int64_t>());
  }
  return acc;
}

}  // namespace

Result<int64_t> SumOf(const std::vector<nlohmann::json>& all, const std::string& key) {
  return Reduce(all, key, std::plus<int64_t>());
}
Result<int64_t> MaxOf(const std::vector<nlohmann::json>& all, const std::string& key) {
  return Reduce(all, key, [](int64_t a, int64_t b) { return std::max(a, b); });
}
Result<int64_t> MinOf(const std::vector<nlohmann::json>& all, const std::string& key) {
  return Reduce(all, key, [](int64_t a, int64_t b) { return std::min(a, b); });
}

Result<nlohmann::json> ReduceLoadReports(const std::vector<nlohmann::json>& all) {
  nlohmann::json out = nlohmann::json::object();
  for (const char* k : {"bytes", "received", "elements", "bad", "opt_bad", "opt_elements"}) {
    CKPT_ASSIGN_OR_RETURN(int64_t v, SumOf(all, k));
    out[k] = v;
  }
  CKPT_ASSIGN_OR_RETURN(int64_t max_bytes, MaxOf(all, "bytes"));
  out["max_rank_bytes"] = std::max<int64_t>(max_bytes, 0);
  for (const char* k : {"rounds", "extra", "state", "largest_shard"}) {
    CKPT_ASSIGN_OR_RETURN(int64_t v, MaxOf(all, k));
    out[k] = std::max<int64_t>(v, 0);  // -1 (unknown) on every rank reads as 0
  }
  bool reset = true;
  std::string first_bad;
  nlohmann::json per_rank = nlohmann::json::array();
  for (size_t r = 0; r < all.size(); ++r) {
    const nlohmann::json& a = all[r];
    if (!a.contains("peak_reset") || !a["peak_reset"].is_boolean() || !a.contains("first_bad") ||
        !a["first_bad"].is_string())
      return Status::InvalidArgument("the load report of rank " + std::to_string(r) + " is incomplete");
    reset = reset && a["peak_reset"].get<bool>();
    if (first_bad.empty()) first_bad = a["first_bad"].get<std::string>();
    per_rank.push_back({{"rss_before", a.value("rss_before", int64_t(-1))}, {"peak", a.value("peak", int64_t(-1))},
                        {"extra", a["extra"]}, {"state", a["state"]}});
  }
  out["peak_reset"] = reset;
  out["first_bad"] = first_bad;
  out["per_rank"] = per_rank;
  return out;
}

}  // namespace ckpt::workload
