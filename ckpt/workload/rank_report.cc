// AllGatherJson and the reductions over per-rank reports: see rank_report.h.
#include "ckpt/workload/rank_report.h"

#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <fstream>
#include <functional>
#include <sstream>

#include "ckpt/base/clock.h"

namespace ckpt::workload {

Result<std::vector<nlohmann::json>> AllGatherJson(Comm& comm, const nlohmann::json& mine, Millis timeout,
                                                  Phase phase) {
  CKPT_ASSIGN_OR_RETURN(auto all, comm.AllGather(mine.dump(), timeout, phase));
  std::vector<nlohmann::json> out;
  for (size_t r = 0; r < all.size(); ++r) {
    nlohmann::json j = nlohmann::json::parse(all[r], nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
      return Status::Internal("rank " + std::to_string(r) + " sent a malformed report in phase '" +
                              std::string(PhaseName(phase)) + "'");
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
  // Each rank's LoadStatsJson keys in, the report's shorter names out.
  for (auto [in, as] : {std::pair{"bytes_read", "bytes"}, {"bytes_received", "received"}, {"elements", "elements"},
                        {"zero_filled", "zero_filled"}, {"bad", "bad"}, {"opt_bad", "opt_bad"},
                        {"opt_elements", "opt_elements"}}) {
    CKPT_ASSIGN_OR_RETURN(int64_t v, SumOf(all, in));
    out[as] = v;
  }
  CKPT_ASSIGN_OR_RETURN(int64_t max_bytes, MaxOf(all, "bytes_read"));
  out["max_rank_bytes"] = std::max<int64_t>(max_bytes, 0);
  for (auto [in, as] : {std::pair{"share_rounds", "rounds"}, {"extra", "extra"}, {"state", "state"},
                        {"largest_shard", "largest_shard"}}) {
    CKPT_ASSIGN_OR_RETURN(int64_t v, MaxOf(all, in));
    out[as] = std::max<int64_t>(v, 0);  // -1 (unknown) on every rank reads as 0
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
                        {"extra", a["extra"]}, {"state", a["state"]}, {"bytes", a["bytes_read"]},
                        {"received", a["bytes_received"]}});
  }
  out["peak_reset"] = reset;
  out["first_bad"] = first_bad;
  out["per_rank"] = per_rank;
  return out;
}

namespace {

// Seconds of `phase` in a SaveStats::phase_seconds JSON object (keyed by PhaseName).
double PhaseOf(const nlohmann::json& phases, Phase phase) {
  auto it = phases.find(std::string(PhaseName(phase)));
  return it != phases.end() && it->is_number() ? it->get<double>() : 0.0;
}

}  // namespace

Result<nlohmann::json> ReduceSaveReports(const std::vector<nlohmann::json>& all) {
  if (all.empty()) return Status::InvalidArgument("no save reports");
  nlohmann::json per_rank = nlohmann::json::array();
  std::vector<double> writes;
  size_t slow = 0, waited = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    const nlohmann::json& a = all[r];
    if (!a.contains("phase_seconds") || !a["phase_seconds"].is_object() || !a.contains("bytes_written") ||
        !a["bytes_written"].is_number_integer())
      return Status::InvalidArgument("the save report of rank " + std::to_string(r) + " is incomplete");
    const nlohmann::json& ph = a["phase_seconds"];
    const double wait = PhaseOf(ph, Phase::kVote) + PhaseOf(ph, Phase::kCommit);
    per_rank.push_back({{"rank", r}, {"bytes", a["bytes_written"]}, {"plan_s", PhaseOf(ph, Phase::kPlan)},
                        {"write_s", PhaseOf(ph, Phase::kWrite)}, {"wait_s", wait}});
    writes.push_back(PhaseOf(ph, Phase::kWrite));
    if (writes[r] > writes[slow]) slow = r;
    if (wait > per_rank[waited]["wait_s"].get<double>()) waited = r;
  }
  std::vector<double> sorted = writes;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  nlohmann::json straggler = {{"rank", slow},
                              {"phase", std::string(PhaseName(Phase::kWrite))},
                              {"seconds", writes[slow]},
                              {"median_seconds", median},
                              {"ratio", median > 0 ? writes[slow] / median : 0.0},
                              {"longest_wait_rank", waited},
                              {"longest_wait_seconds", per_rank[waited]["wait_s"]}};
  return nlohmann::json{{"per_rank", per_rank}, {"straggler", straggler}};
}

Result<nlohmann::json> ReduceRestoreReports(const std::vector<nlohmann::json>& all) {
  nlohmann::json out = {{"seconds", 0.0}, {"fetched_bytes_all_ranks", 0}, {"ranks_fetched_from_peers", 0}};
  for (size_t r = 0; r < all.size(); ++r) {
    const nlohmann::json& a = all[r];
    if (!a.contains("seconds") || !a["seconds"].is_number() || !a.contains("fetched_bytes") ||
        !a["fetched_bytes"].is_number_integer() || !a.contains("phases"))
      return Status::InvalidArgument("the restore report of rank " + std::to_string(r) + " is incomplete");
    if (a["seconds"].get<double>() >= out["seconds"].get<double>()) {
      out["seconds"] = a["seconds"];
      out["slowest_rank"] = {{"rank", r}, {"phases_seconds", a["phases"]}};
    }
    out["per_rank"].push_back({{"rank", r},
                               {"seconds", a["seconds"]},
                               {"cpu_seconds", a.value("cpu_seconds", -1.0)},
                               {"phases_seconds", a["phases"]}});
    const int64_t fetched = a["fetched_bytes"].get<int64_t>();
    out["fetched_bytes_all_ranks"] = out["fetched_bytes_all_ranks"].get<int64_t>() + fetched;
    out["ranks_fetched_from_peers"] = out["ranks_fetched_from_peers"].get<int64_t>() + (fetched > 0);
  }
  return out;
}

nlohmann::json WithLoadPhases(nlohmann::json phases, const LoadStats& ls) {
  phases.update({{"load_read", ls.read_seconds},
                 {"load_hash", ls.hash_seconds},
                 {"load_decode", ls.decode_seconds},
                 {"load_copy", ls.copy_seconds},
                 {"load_threads", ls.threads}});
  return phases;
}

double ProcessAgeSeconds() {
  // /proc/self/stat field 22: start time in clock ticks after boot; the
  // command name (field 2) may hold spaces, so fields count from its ')'.
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  double up = -1;
  if (close == std::string::npos || !(uptime >> up)) return -1;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  for (int i = 3; i < 22 && rest >> field;) ++i;
  unsigned long long start = 0;
  if (!(rest >> start)) return -1;
  return up - double(start) / double(sysconf(_SC_CLK_TCK));
}

namespace {
double CpuSeconds() { return double(std::clock()) / CLOCKS_PER_SEC; }
}  // namespace

RestoreTimer::RestoreTimer() : wall_(std::chrono::steady_clock::now()), cpu_(CpuSeconds()), age_(ProcessAgeSeconds()) {}

double RestoreTimer::Since() const { return ckpt::Since(wall_); }

nlohmann::json RestoreTimer::Report(nlohmann::json phases, int64_t fetched_bytes) const {
  phases["before_restore"] = age_;
  return {
      {"seconds", Since()}, {"cpu_seconds", CpuSeconds() - cpu_}, {"fetched_bytes", fetched_bytes}, {"phases", phases}};
}

}  // namespace ckpt::workload
