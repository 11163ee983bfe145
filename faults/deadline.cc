#include "faults/deadline.h"

#include <charconv>
#include <cstdio>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/save_progress.h"
#include "ckpt/base/env.h"

namespace ckpt::faults {
namespace {

std::string Fmt(const char* fmt, auto... args) {
  char buf[512];
  std::snprintf(buf, sizeof buf, fmt, args...);
  return buf;
}

bool ParseNumber(const std::string& s, int64_t* v) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *v);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}

// A survivor's verdict is judged by the typed fields of its failure (the
// rank's result, faults/child.h AddFailure), never by message text: a
// deadline failure records the missing ranks, their hosts and the phase; a
// failure passed on from rank F records F and its phase as the origin.
void ReadFailure(const nlohmann::json& r, SurvivorReport* s) {
  s->origin_rank = r.value("origin_rank", -1);
  s->origin_phase = ParsePhase(r.value("origin_phase", "")).value_or(Phase::kNone);
  s->missing_ranks = r.value("missing_ranks", std::vector<int>{});
  s->missing_hosts = r.value("missing_hosts", std::vector<std::string>{});
  s->missing_phase = ParsePhase(r.value("missing_phase", "")).value_or(Phase::kNone);
  s->names_rank_and_phase = (!s->missing_ranks.empty() && s->missing_phase != Phase::kNone) ||
                            (s->origin_rank >= 0 && s->origin_phase != Phase::kNone);
}

// Whether the survivor names the faulty rank in the expected phase (and, for
// a lost rank, the host it ran on).
bool NamesFaulty(const SurvivorReport& s, const DeadlineScenario& sc) {
  if (sc.action == Action::kEio) return s.origin_rank == sc.rank && s.origin_phase == sc.expect_phase;
  for (size_t i = 0; i < s.missing_ranks.size(); ++i)
    if (s.missing_ranks[i] == sc.rank)
      return s.missing_phase == sc.expect_phase && i < s.missing_hosts.size() && !s.missing_hosts[i].empty();
  return false;
}

class Checker {
 public:
  explicit Checker(const DeadlineOptions& o) : o_(o), world_(WorldOf(o.job.layout)) {}

  Status Prepare() {
    baseline_ = JoinPath(o_.work_dir, "baseline/root");
    CKPT_RETURN_IF_ERROR(PrepareWorkDir(o_.work_dir));
    CKPT_RETURN_IF_ERROR(CreateDirs(DefaultEnv(), JoinPath(o_.work_dir, "baseline")));
    std::vector<std::string> args = {"--phase", "save", "--root", baseline_, "--layout", o_.job.layout,
                                     "--model", o_.job.model, "--iter", std::to_string(o_.old_iter)};
    CKPT_ASSIGN_OR_RETURN(ProcResult pr, RunChildJob(o_.job, args, JoinPath(o_.work_dir, "baseline/save"), 120,
                                                     o_.mpi_extra));
    if (pr.exit_code != 0) return Status::Internal("deadline baseline save failed (" + o_.work_dir + "/baseline/save.err)");
    return Status::Ok();
  }

  Result<DeadlineResult> Run(const DeadlineScenario& sc, int index) {
    const std::string dir = JoinPath(o_.work_dir, std::to_string(index));
    const std::string root = JoinPath(dir, "root"), res = JoinPath(dir, "res");
    CKPT_RETURN_IF_ERROR(CloneTree(baseline_, root));
    CKPT_RETURN_IF_ERROR(CreateDirs(DefaultEnv(), res));
    FaultRule rule;
    rule.point = sc.point;
    rule.rank = sc.rank;
    rule.nth = sc.nth;
    rule.action = sc.action;
    std::vector<std::string> args = {"--phase", sc.phase, "--root", root, "--layout", o_.job.layout,
                                     "--model", o_.job.model, "--result-dir", res, "--timeout-ms",
                                     std::to_string(o_.job.timeout_ms), "--spec", rule.ToString()};
    if (sc.phase == "save") args.insert(args.end(), {"--iter", std::to_string(o_.new_iter)});
    std::vector<std::string> extra = {"--enable-recovery"};
    extra.insert(extra.end(), o_.mpi_extra.begin(), o_.mpi_extra.end());
    auto reported = [&] {
      int n = 0;
      for (int r = 0; r < world_; ++r)
        if (r != sc.rank && PathExists(JoinPath(res, "rank_" + std::to_string(r) + ".json"))) ++n;
      return n == world_ - 1;
    };
    const double limit = 3.0 * o_.job.timeout_ms / 1000 + 30;
    CKPT_ASSIGN_OR_RETURN(ProcResult pr, RunChildJob(o_.job, args, JoinPath(dir, "job"), limit, extra, reported));
    DeadlineResult out;
    out.scenario = sc;
    if (pr.timed_out) out.problems.push_back("not every survivor reported within " + std::to_string(int(limit)) + " s");
    CKPT_RETURN_IF_ERROR(Judge(sc, res, root, &out));
    if (out.problems.empty()) CKPT_RETURN_IF_ERROR(RemoveAll(dir));
    return out;
  }

 private:
  Status Judge(const DeadlineScenario& sc, const std::string& res, const std::string& root, DeadlineResult* out) {
    int64_t t_fault = -1;
    for (const auto& e : ReadJsonLines(JoinPath(res, "events.jsonl")))
      if (e.value("rank", -1) == sc.rank && e.value("point", "") == sc.point) t_fault = e.value("t_ns", int64_t(-1));
    if (t_fault < 0) out->problems.push_back("the fault did not fire");
    const double bound = BoundSeconds(sc, o_.job.timeout_ms);
    out->bound_s = bound;
    out->min_latency_s = 1e9;
    for (int r = 0; r < world_; ++r) {
      if (r == sc.rank) continue;
      auto lines = ReadJsonLines(JoinPath(res, "rank_" + std::to_string(r) + ".json"));
      SurvivorReport s;
      s.rank = r;
      if (!lines.empty()) {
        s.failed = !lines.front().value("ok", true);
        s.message = lines.front().value("error", "");
        if (t_fault >= 0) s.latency_s = double(lines.front().value("t_end_ns", int64_t(0)) - t_fault) / 1e9;
      }
      if (!lines.empty()) ReadFailure(lines.front(), &s);
      s.names_faulty = NamesFaulty(s, sc);
      auto bad = [&](const std::string& why) { out->problems.push_back("rank " + std::to_string(r) + ": " + why); };
      if (lines.empty()) bad("no report");
      else if (!s.failed) bad("did not fail");
      else if (s.latency_s > bound) bad(Fmt("failed after %.2f s > bound %.2f s", s.latency_s, bound));
      if (s.failed && !s.names_rank_and_phase) bad("failure records no rank and phase: " + s.message);
      if (s.failed && !s.names_faulty)
        bad("does not record rank " + std::to_string(sc.rank) + (sc.action == Action::kEio ? "" : " and its host") +
            " in phase '" + std::string(PhaseName(sc.expect_phase)) + "': " + s.message);
      if (s.latency_s >= 0) {
        out->max_latency_s = std::max(out->max_latency_s, s.latency_s);
        out->min_latency_s = std::min(out->min_latency_s, s.latency_s);
      }
      out->survivors.push_back(std::move(s));
    }
    if (out->min_latency_s > out->max_latency_s) out->min_latency_s = out->max_latency_s;
    return CheckDisk(sc, root, out);
  }

  Status CheckDisk(const DeadlineScenario& sc, const std::string& root, DeadlineResult* out) {
    if (sc.phase == "save") {
      CKPT_ASSIGN_OR_RETURN(FileInfo dir, DefaultEnv()->Stat(JoinPath(root, IterDirName(o_.new_iter))));
      auto tracked = ReadTracker(DefaultEnv(), root);
      out->committed = dir.exists || !tracked.ok() || *tracked != o_.old_iter;
      if (out->committed) out->problems.push_back("the new iteration was committed (or the tracker moved)");
    }
    CKPT_ASSIGN_OR_RETURN(Recovery r, RecoverLatest(o_.job, "tp=1", root, false, JoinPath(root, "../recover")));
    out->old_loads = r.ok && r.iteration == o_.old_iter && r.mismatches == 0;
    if (!out->old_loads) out->problems.push_back("the old checkpoint does not load: " + r.error);
    return Status::Ok();
  }

  const DeadlineOptions& o_;
  int world_;
  std::string baseline_;
};

}  // namespace

double BoundSeconds(const DeadlineScenario& sc, int64_t timeout_ms) {
  const Millis t(timeout_ms);
  if (sc.action == Action::kEio) return double(timeout_ms) / 2000.0;
  // A survivor whose wait for root's decision expires first looks on disk for
  // a commit root may have made (a committed save is never reported failed):
  // that look is part of its bound when root is the faulty rank.
  if (sc.rank == 0) return double(DecisionTimeout(t).count() + kRootCommitLook.count()) / 1000.0 + 1.0;
  return double(t.count()) / 1000.0 + 1.0;
}

std::string DeadlineScenario::Name() const {
  return phase + ":" + std::string(ActionName(action)) + "@" + point + "#" + std::to_string(nth) + ":r" +
         std::to_string(rank) + "=" + std::string(PhaseName(expect_phase));
}

Result<DeadlineScenario> ParseDeadlineScenario(const std::string& text) {
  DeadlineScenario s;
  auto bad = [&] {
    return Status::InvalidArgument("deadline scenario '" + text +
                                   "': want <save|load>:<hang|sigkill|eio>@<point>#<nth>:r<rank>=<phase>");
  };
  size_t c1 = text.find(':'), at = text.find('@'), hash = text.find('#'), c2 = text.rfind(":r"), eq = text.rfind('=');
  if (c1 == std::string::npos || at == std::string::npos || hash == std::string::npos || c2 == std::string::npos ||
      eq == std::string::npos || !(c1 < at && at < hash && hash < c2 && c2 < eq))
    return bad();
  s.phase = text.substr(0, c1);
  auto action = ParseAction(text.substr(c1 + 1, at - c1 - 1));
  if (!action.ok() || (*action != Action::kHang && *action != Action::kSigkill && *action != Action::kEio))
    return bad();
  s.action = *action;
  s.point = text.substr(at + 1, hash - at - 1);
  if (!ParseNumber(text.substr(hash + 1, c2 - hash - 1), &s.nth)) return bad();
  int64_t rank = -1;
  if (!ParseNumber(text.substr(c2 + 2, eq - c2 - 2), &rank)) return bad();
  s.rank = int(rank);
  const std::optional<Phase> expect = ParsePhase(text.substr(eq + 1));
  if (!expect || *expect == Phase::kNone) return bad();
  s.expect_phase = *expect;
  if ((s.phase != "save" && s.phase != "load") || !IsKnownPoint(s.point) || s.nth < 1 || s.rank < 0) return bad();
  return s;
}

std::vector<DeadlineScenario> DefaultDeadlineScenarios(int world) {
  const int a = std::min(5, world - 1), b = std::min(3, world - 1), c = std::min(2, world - 1);
  using A = Action;
  return {
      {"save", "step.begin", 0, 1, A::kHang, Phase::kBegin},
      {"save", "step.plan", a, 1, A::kHang, Phase::kPlan},
      {"save", "env.fsync", b, 1, A::kHang, Phase::kVote},
      {"save", "step.vote", a, 1, A::kHang, Phase::kVote},
      {"save", "step.manifest_write", 0, 1, A::kHang, Phase::kCommit},
      {"save", "step.vote", a, 1, A::kSigkill, Phase::kVote},
      {"save", "env.pwrite", c, 5, A::kSigkill, Phase::kVote},
      {"save", "step.dir_rename", 0, 1, A::kSigkill, Phase::kCommit},
      {"load", "env.pread", b, 1, A::kHang, Phase::kLoad},
      {"load", "env.pread", std::min(4, world - 1), 2, A::kSigkill, Phase::kLoad},
      {"save", "step.plan", a, 1, A::kEio, Phase::kPlan},
  };
}

Result<std::vector<DeadlineResult>> RunDeadlineChecks(const DeadlineOptions& opts) {
  if (WorldOf(opts.job.layout) < 2) return Status::InvalidArgument("deadline checks need a layout of 2+ ranks");
  Checker c(opts);
  CKPT_RETURN_IF_ERROR(c.Prepare());
  const auto scenarios = opts.scenarios.empty() ? DefaultDeadlineScenarios(WorldOf(opts.job.layout)) : opts.scenarios;
  std::vector<DeadlineResult> out;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    CKPT_ASSIGN_OR_RETURN(DeadlineResult r, c.Run(scenarios[i], int(i)));
    if (opts.log)
      opts.log(Fmt("%-40s latency %.2f-%.2f s %s", scenarios[i].Name().c_str(), r.min_latency_s, r.max_latency_s,
                   r.problems.empty() ? "ok" : r.problems.front().c_str()));
    out.push_back(std::move(r));
  }
  return out;
}

std::string DeadlineTable(const std::vector<DeadlineResult>& results, int64_t timeout_ms) {
  const DeadlineScenario root_hang{"save", "step.vote", 0, 1, Action::kHang, Phase::kNone};
  std::string s = Fmt("hung/dead/failing ranks: deadline %lld ms, bound deadline + 1 s = %.1f s (faulty rank 0: "
                      "1.25 x deadline + 1.25 s = %.2f s; eio: deadline / 2 = %.2f s)\n",
                      static_cast<long long>(timeout_ms), timeout_ms / 1000.0 + 1, BoundSeconds(root_hang, timeout_ms),
                      timeout_ms / 2000.0);
  s += Fmt("%-42s %9s %14s %9s %9s %6s\n", "scenario", "survivors", "latency (s)", "named", "committed", "result");
  int failed = 0;
  for (const auto& r : results) {
    int down = 0, named = 0;
    for (const auto& v : r.survivors) {
      down += v.failed;
      named += v.names_faulty;
    }
    failed += !r.problems.empty();
    s += Fmt("%-42s %4d/%-4zu %6.2f - %5.2f %4d/%-4zu %9s %6s\n", r.scenario.Name().c_str(), down,
             r.survivors.size(), r.min_latency_s, r.max_latency_s, named, r.survivors.size(),
             r.committed ? "YES" : "no", r.problems.empty() ? "ok" : "FAIL");
    for (const auto& p : r.problems) s += "    " + p + "\n";
  }
  for (const auto& r : results)  // what a survivor that did not wait on the faulty rank itself says
    for (const auto& v : r.survivors)
      if (v.rank != 0 && r.scenario.rank != 0) {
        s += "  e.g. " + r.scenario.Name() + " rank " + std::to_string(v.rank) + ": " + v.message + "\n";
        break;
      }
  s += Fmt("%d of %zu scenarios failed\n", failed, results.size());
  return s;
}

}  // namespace ckpt::faults
