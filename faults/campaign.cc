// RunCampaign: baseline, trace, replay every boundary x variant, recover, judge.
#include "faults/campaign.h"

#include <chrono>
#include <fstream>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/base/env.h"
#include "faults/campaign_internal.h"
#include "faults/power_loss.h"

namespace ckpt::faults {
namespace internal {

using Clock = std::chrono::steady_clock;

const std::vector<VariantDef>& Defs() {
  static const std::vector<VariantDef> defs = {
      {"powercut", Action::kPowerCut, false, false, Applies::kAnyOrEnd},
      {"crash", Action::kCrash, false, false, Applies::kAny},
      {"sigkill", Action::kSigkill, false, false, Applies::kAny},
      {"hang", Action::kHang, false, false, Applies::kSteps},
      {"eio", Action::kEio, false, true, Applies::kAny},
      {"enospc", Action::kEnospc, false, true, Applies::kAny},
      {"eio-persist", Action::kEio, true, true, Applies::kAny},
      {"enospc-persist", Action::kEnospc, true, true, Applies::kAny},
      {"short", Action::kShortWrite, false, true, Applies::kWrites},
      {"delay", Action::kDelay, false, true, Applies::kAny},
  };
  return defs;
}

bool AppliesTo(const VariantDef& d, const Boundary& b) {
  if (b.rank < 0) return d.applies == Applies::kAnyOrEnd;
  switch (d.applies) {
    case Applies::kAny:
    case Applies::kAnyOrEnd: return true;
    case Applies::kSteps: return b.point.rfind("step.", 0) == 0;
    case Applies::kWrites: return b.point == "env.pwrite";
  }
  return false;
}

std::string SpecFor(const VariantDef& d, const Boundary& b, bool no_fsync) {
  std::string s;
  if (b.rank >= 0) {
    FaultRule r;
    r.point = b.point;
    r.rank = b.rank;
    r.nth = b.nth;
    r.action = d.action;
    r.persistent = d.persistent;
    r.ms = 50;
    s = r.ToString();
  }
  if (no_fsync) s += s.empty() ? "nosync" : "; nosync";
  return s;
}

Campaign::Campaign(const CampaignOptions& opts) : o_(opts) {
  rep_.layout = o_.job.layout;
  rep_.model = o_.job.model;
  rep_.recover_layout = o_.recover_layout;
  rep_.world = WorldOf(o_.job.layout);
  rep_.old_iter = o_.old_iter;
  rep_.new_iter = o_.new_iter;
  rep_.no_fsync = o_.no_fsync;
  rep_.in_place_commit = o_.in_place_commit;
  rep_.rule = o_.rule == BoundaryRule::kAll
                  ? "all: every traced operation of every rank"
                  : "smart: every operation except data writes, plus the first, middle and last env.pwrite of each "
                    "file, per rank";
  rep_.rule += "; powercut also after the job (\"end\")";
}

void Campaign::Log(const std::string& line) const {
  if (o_.log) o_.log(line);
}

bool Campaign::LinkOld(const std::string& rel) const {
  const std::string prefix = IterDirName(o_.old_iter) + "/";
  return rel.rfind(prefix, 0) == 0 && rel.size() > 3 && rel.substr(rel.size() - 3) == ".h5";
}

std::function<bool(const std::string&)> Campaign::Linker() const {
  return [this](const std::string& rel) { return LinkOld(rel); };
}

std::vector<std::string> Campaign::SaveArgs(const std::string& root, const std::string& res, int64_t iter) const {
  std::vector<std::string> args = {"--phase", "save", "--root", root, "--layout", o_.job.layout, "--model",
                                   o_.job.model, "--iter", std::to_string(iter), "--result-dir", res, "--timeout-ms",
                                   std::to_string(o_.job.timeout_ms), "--chunk-kb", std::to_string(o_.job.chunk_kb)};
  if (o_.in_place_commit) args.push_back("--in-place-commit");
  return args;
}

double Campaign::JobLimit(int cases) const { return cases * (3.0 * o_.job.timeout_ms / 1000 + 3) + 30; }

Status Campaign::Prepare() {
  baseline_ = JoinPath(o_.work_dir, "baseline/root");
  const std::string dir = JoinPath(o_.work_dir, "baseline");
  CKPT_RETURN_IF_ERROR(CreateDirs(DefaultEnv(), dir));
  std::vector<std::string> args = SaveArgs(baseline_, dir, o_.old_iter);
  CKPT_ASSIGN_OR_RETURN(ProcResult pr, RunChildJob(o_.job, args, JoinPath(dir, "save"), JobLimit(1), o_.mpi_extra));
  if (pr.exit_code != 0) return Status::Internal("baseline save failed; see " + JoinPath(dir, "save.err"));
  // Leftovers of an earlier crashed save: the new save's GC must remove them.
  const std::string stale = JoinPath(baseline_, TmpIterDirName(o_.old_iter + 5, "00000000deadbeef"));
  CKPT_RETURN_IF_ERROR(DefaultEnv()->CreateDir(stale));
  CKPT_RETURN_IF_ERROR(WriteStringToFileSync(DefaultEnv(), JoinPath(stale, ShardFileName(0)), "partial shard"));
  CKPT_RETURN_IF_ERROR(WriteStringToFileSync(DefaultEnv(), JoinPath(baseline_, std::string(kTrackerName) + ".tmp"),
                                             std::to_string(o_.old_iter + 5) + "\n"));
  CKPT_ASSIGN_OR_RETURN(Recovery r, RecoverLatest(o_.job, o_.recover_layout, baseline_, false, JoinPath(dir, "load")));
  if (!r.ok || r.iteration != o_.old_iter || r.mismatches != 0)
    return Status::Internal("baseline does not load as iteration " + std::to_string(o_.old_iter) + ": " + r.error);
  return Status::Ok();
}

Result<std::vector<std::vector<TraceEntry>>> Campaign::RecordTrace(const std::string& name, std::string* root) {
  const std::string dir = JoinPath(o_.work_dir, name);
  *root = JoinPath(dir, "root");
  CKPT_RETURN_IF_ERROR(CloneTree(baseline_, *root, Linker()));
  const std::string tdir = JoinPath(dir, "trace");
  CKPT_RETURN_IF_ERROR(CreateDirs(DefaultEnv(), tdir));
  std::vector<std::string> args = SaveArgs(*root, dir, o_.new_iter);
  args.insert(args.end(), {"--trace-dir", tdir});
  CKPT_ASSIGN_OR_RETURN(ProcResult pr, RunChildJob(o_.job, args, JoinPath(dir, "save"), JobLimit(1), o_.mpi_extra));
  if (pr.exit_code != 0) return Status::Internal("traced save failed; see " + JoinPath(dir, "save.err"));
  std::vector<std::vector<TraceEntry>> traces;
  for (int r = 0; r < rep_.world; ++r) {
    CKPT_ASSIGN_OR_RETURN(std::string text, ReadFileToString(DefaultEnv(), JoinPath(tdir, "rank_" + std::to_string(r) + ".jsonl")));
    CKPT_ASSIGN_OR_RETURN(auto t, TraceFromJsonLines(text));
    traces.push_back(std::move(t));
  }
  return traces;
}

Status Campaign::Trace() {
  std::string root2;
  CKPT_ASSIGN_OR_RETURN(traces_, RecordTrace("trace1", &trace_root_));
  CKPT_ASSIGN_OR_RETURN(auto again, RecordTrace("trace2", &root2));
  for (int r = 0; r < rep_.world && rep_.trace_stable; ++r) {
    std::string diff;
    rep_.trace_stable = SameTrace(traces_[r], trace_root_, again[r], root2, &diff);
    if (!rep_.trace_stable) rep_.trace_difference = "rank " + std::to_string(r) + " " + diff;
  }
  for (const auto& t : traces_) rep_.traced_ops.push_back(int64_t(t.size()));
  CKPT_ASSIGN_OR_RETURN(Recovery r, RecoverLatest(o_.job, o_.recover_layout, trace_root_, false,
                                                  JoinPath(o_.work_dir, "trace1/load")));
  if (!r.ok || r.iteration != o_.new_iter || r.mismatches != 0)
    return Status::Internal("the fault-free save does not load as iteration " + std::to_string(o_.new_iter) + ": " +
                            r.error);
  return RemoveAll(JoinPath(o_.work_dir, "trace2"));
}

Outcome Campaign::Judge(const Recovery& r, bool acked, std::string* detail) const {
  if (r.hung) {
    *detail = "recovery load did not finish";
    return Outcome::kHang;
  }
  if (!r.ok) {
    *detail = r.error;
    return acked ? Outcome::kLost : Outcome::kError;
  }
  *detail = "loaded iteration " + std::to_string(r.iteration);
  if (r.mismatches > 0) {
    *detail += ", " + std::to_string(r.mismatches) + " elements wrong, first " + r.first_bad;
    return Outcome::kTorn;
  }
  if (r.iteration == o_.new_iter) return Outcome::kNew;
  if (r.iteration == o_.old_iter) return acked ? Outcome::kLost : Outcome::kOld;
  return Outcome::kTorn;
}

VariantStats& Campaign::Stats(const std::string& variant) {
  auto it = stats_index_.find(variant);
  if (it != stats_index_.end()) return rep_.variants[it->second];
  stats_index_[variant] = rep_.variants.size();
  rep_.variants.push_back({variant, {}, {}, 0, {}, 0});
  return rep_.variants.back();
}

void Campaign::Record(RunRecord rec) {
  VariantStats& v = Stats(rec.variant);
  v.points.insert(rec.boundary.point);
  v.ranks.insert(rec.boundary.rank);
  ++v.runs;
  ++v.counts[rec.outcome];
  const bool bad = IsViolation(rec.outcome);
  if (bad) Log("VIOLATION " + rec.variant + " @ " + rec.boundary.Name() + ": " + std::string(OutcomeName(rec.outcome)) +
               ": " + rec.detail + " [" + rec.dir + "]");
  if (bad) keep_dir_ = true;
  size_t errors = 0;
  for (const auto& n : rep_.notable) errors += n.outcome == Outcome::kError ? 1 : 0;
  if (bad || (rec.outcome == Outcome::kError && errors < 5)) rep_.notable.push_back(std::move(rec));
}

std::string Campaign::FiredCheck(const std::string& res, const std::string& root, const Boundary& b) const {
  if (b.rank < 0) return "";
  for (const auto& e : ReadJsonLines(JoinPath(res, "events.jsonl"))) {
    if (e.value("rank", -1) != b.rank || e.value("point", "") != b.point || e.value("nth", int64_t(0)) != b.nth)
      continue;
    const std::string path = NormalizeTracePath(e.value("path", ""), root);
    if (path != b.path) return "fired on '" + path + "', traced '" + b.path + "' (trace drift)";
    return "";
  }
  return "the fault did not fire";
}

bool Campaign::Acked(const std::string& res) const {
  for (int r = 0; r < rep_.world; ++r)
    if (PathExists(JoinPath(res, "ack_rank_" + std::to_string(r)))) return true;
  return false;
}

}  // namespace internal

const std::vector<std::string>& KnownVariants() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const auto& d : internal::Defs()) v.push_back(d.name);
    v.push_back("damage");
    return v;
  }();
  return names;
}

Result<CampaignReport> RunCampaign(const CampaignOptions& opts) {
  for (const auto& v : opts.variants)
    if (std::find(KnownVariants().begin(), KnownVariants().end(), v) == KnownVariants().end())
      return Status::InvalidArgument("unknown campaign variant '" + v + "'");
  for (const auto& m : opts.power_modes) CKPT_RETURN_IF_ERROR(ParsePowerLossMode(m).status());
  if (WorldOf(opts.job.layout) < 1) return Status::InvalidArgument("bad layout '" + opts.job.layout + "'");
  internal::Campaign c(opts);
  return c.Run();
}

}  // namespace ckpt::faults
