// CampaignReport: counts, the printed table and the JSON form.
#include <cstdio>

#include "faults/campaign.h"

namespace ckpt::faults {
namespace {

constexpr Outcome kOutcomes[] = {Outcome::kOld,  Outcome::kNew,  Outcome::kError, Outcome::kTorn,
                                 Outcome::kLost, Outcome::kHang, Outcome::kMissed};

std::string Fmt(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

int64_t Get(const std::map<Outcome, int64_t>& m, Outcome o) {
  auto it = m.find(o);
  return it == m.end() ? 0 : it->second;
}

int RealRanks(const std::set<int>& ranks) {
  int n = 0;
  for (int r : ranks) n += r >= 0 ? 1 : 0;
  return n;
}

}  // namespace

std::string_view OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOld: return "old";
    case Outcome::kNew: return "new";
    case Outcome::kError: return "error";
    case Outcome::kTorn: return "torn";
    case Outcome::kLost: return "lost";
    case Outcome::kHang: return "hang";
    case Outcome::kMissed: return "missed";
  }
  return "?";
}

bool IsViolation(Outcome o) {
  return o == Outcome::kTorn || o == Outcome::kLost || o == Outcome::kHang || o == Outcome::kMissed;
}

int64_t CampaignReport::Count(Outcome o) const {
  int64_t n = 0;
  for (const auto& v : variants) n += Get(v.counts, o);
  return n;
}

int64_t CampaignReport::violations() const {
  int64_t n = 0;
  for (Outcome o : kOutcomes)
    if (IsViolation(o)) n += Count(o);
  for (const auto& [kind, d] : damage) n += d.failed + d.torn;
  return n;
}

std::string CampaignReport::Table() const {
  std::string s = Fmt("fault campaign: layout %s (%d ranks), model %s, iteration %lld -> %lld, recovery under %s%s\n",
                      layout.c_str(), world, model.c_str(), static_cast<long long>(old_iter),
                      static_cast<long long>(new_iter), recover_layout.c_str(),
                      no_fsync ? ", fsync DISABLED (negative control)" : "");
  if (in_place_commit) s += "commit IN PLACE (negative control): iter_N/ and the tracker written in place, no rename\n";
  s += "boundaries (" + rule + ")\n";
  std::string ops;
  for (size_t r = 0; r < traced_ops.size(); ++r) ops += Fmt("%sr%zu %lld", r ? ", " : "", r, static_cast<long long>(traced_ops[r]));
  s += "traced ops per rank: " + ops + "; boundaries " + std::to_string(boundaries) +
       "; trace identical in two recordings: " + (trace_stable ? "yes" : "NO (" + trace_difference + ")") + "\n";
  s += Fmt("%-18s %6s %5s %5s %5s %5s %5s %5s %5s %5s %6s %7s\n", "variant", "points", "ranks", "runs", "old", "new",
           "error", "torn", "lost", "hang", "missed", "seconds");
  VariantStats total;
  for (const auto& v : variants) {
    s += Fmt("%-18s %6zu %5d %5lld", v.variant.c_str(), v.points.size(), RealRanks(v.ranks),
             static_cast<long long>(v.runs));
    for (Outcome o : kOutcomes) s += Fmt(o == Outcome::kMissed ? " %6lld" : " %5lld", static_cast<long long>(Get(v.counts, o)));
    s += Fmt(" %7.1f\n", v.seconds);
    total.runs += v.runs;
    total.seconds += v.seconds;
    total.points.insert(v.points.begin(), v.points.end());
    total.ranks.insert(v.ranks.begin(), v.ranks.end());
    for (Outcome o : kOutcomes) total.counts[o] += Get(v.counts, o);
  }
  s += Fmt("%-18s %6zu %5d %5lld", "total", total.points.size(), RealRanks(total.ranks), static_cast<long long>(total.runs));
  for (Outcome o : kOutcomes) s += Fmt(o == Outcome::kMissed ? " %6lld" : " %5lld", static_cast<long long>(Get(total.counts, o)));
  s += Fmt(" %7.1f\n", seconds);  // the variants' own columns overlap (powercut rows share jobs)
  if (!damage.empty()) {
    s += Fmt("%-18s %5s %8s %6s %8s %6s %6s %9s %10s %6s %5s\n", "damage", "runs", "verify", "named", "loader",
             "named", "unread", "fallback", "undetected", "failed", "torn");
    for (const auto& [kind, d] : damage)
      s += Fmt("%-18s %5lld %8lld %6lld %8lld %6lld %6lld %9lld %10lld %6lld %5lld\n", kind.c_str(),
               static_cast<long long>(d.runs), static_cast<long long>(d.verify_detected),
               static_cast<long long>(d.verify_named), static_cast<long long>(d.load_detected),
               static_cast<long long>(d.load_named), static_cast<long long>(d.unread),
               static_cast<long long>(d.fallback_old),
               static_cast<long long>(d.undetected), static_cast<long long>(d.failed), static_cast<long long>(d.torn));
  }
  s += Fmt("violations (torn + lost + hang + missed + damage failed/torn): %lld; %.1f s\n",
           static_cast<long long>(violations()), seconds);
  if (!reruns.empty()) {
    s += Fmt("re-run once after the faulted job outlived its limit (the re-run counted): %zu:", reruns.size());
    for (const auto& r : reruns) s += " " + r;
    s += "\n";
  }
  constexpr size_t kShown = 12;  // the rest is in ToJson()
  for (size_t i = 0; i < notable.size() && i < kShown; ++i) {
    const RunRecord& r = notable[i];
    s += "  " + std::string(IsViolation(r.outcome) ? "VIOLATION " : "") + r.variant + " @ " + r.boundary.Name() +
         ": " + std::string(OutcomeName(r.outcome)) + (r.acked ? " (commit acknowledged)" : "") + ": " + r.detail +
         (r.dir.empty() ? "" : " [" + r.dir + "]") + "\n";
  }
  if (notable.size() > kShown) s += "  ... " + std::to_string(notable.size() - kShown) + " more (--json)\n";
  return s;
}

nlohmann::json CampaignReport::ToJson() const {
  nlohmann::json j = {{"layout", layout}, {"world", world}, {"model", model}, {"recover_layout", recover_layout},
                      {"old_iter", old_iter}, {"new_iter", new_iter}, {"no_fsync", no_fsync},
                      {"in_place_commit", in_place_commit}, {"rule", rule},
                      {"traced_ops", traced_ops}, {"boundaries", boundaries}, {"trace_stable", trace_stable},
                      {"violations", violations()}, {"seconds", seconds}, {"reruns", reruns}};
  for (const auto& v : variants) {
    nlohmann::json row = {{"variant", v.variant}, {"points", v.points.size()}, {"ranks", RealRanks(v.ranks)},
                          {"runs", v.runs}, {"seconds", v.seconds}};
    for (Outcome o : kOutcomes) row[std::string(OutcomeName(o))] = Get(v.counts, o);
    j["variants"].push_back(row);
  }
  for (const auto& [kind, d] : damage)
    j["damage"][kind] = {{"runs", d.runs}, {"verify_detected", d.verify_detected}, {"verify_named", d.verify_named},
                         {"load_detected", d.load_detected}, {"load_named", d.load_named},
                         {"fallback_old", d.fallback_old}, {"undetected", d.undetected}, {"failed", d.failed}, {"unread", d.unread},
                         {"torn", d.torn}};
  for (const auto& r : notable)
    j["notable"].push_back({{"variant", r.variant}, {"boundary", r.boundary.Name()},
                            {"outcome", OutcomeName(r.outcome)}, {"acked", r.acked}, {"detail", r.detail}});
  return j;
}

}  // namespace ckpt::faults
