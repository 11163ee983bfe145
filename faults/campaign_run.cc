// The replay loops of RunCampaign: one job per crash-type fault, batched jobs
// for faults no process dies of, and the after-commit damage cases.
#include <chrono>
#include <fstream>

#include "ckpt/base/clock.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/verify.h"
#include "faults/campaign_internal.h"
#include "faults/damage.h"
#include "faults/power_loss.h"

namespace ckpt::faults::internal {
namespace {

using Clock = std::chrono::steady_clock;

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

Result<CampaignReport> Campaign::Run() {
  const auto t0 = Clock::now();
  CKPT_RETURN_IF_ERROR(PrepareWorkDir(o_.work_dir));
  CKPT_RETURN_IF_ERROR(Prepare());
  CKPT_RETURN_IF_ERROR(Trace());
  std::vector<Boundary> all = SelectBoundaries(traces_, trace_root_, o_.rule, o_.points, o_.ranks, true);
  rep_.boundaries = int64_t(all.size());
  Log("traced " + std::to_string(rep_.world) + " ranks, " + std::to_string(all.size()) + " boundaries");
  for (const auto& name : o_.variants) {
    const auto v0 = Clock::now();
    if (name == "damage") {
      CKPT_RETURN_IF_ERROR(RunDamage());
      Log("damage done in " + std::to_string(int(Since(v0))) + " s");
      continue;
    }
    const VariantDef& d = *std::find_if(Defs().begin(), Defs().end(), [&](const VariantDef& x) { return x.name == name; });
    std::vector<Boundary> bs;
    for (const auto& b : all)
      if (AppliesTo(d, b)) bs.push_back(b);
    CKPT_RETURN_IF_ERROR(d.batched ? RunBatch(d, bs) : RunJobs(d, bs));
    const double secs = Since(v0);
    for (auto& v : rep_.variants)
      if (v.variant == name || v.variant.rfind(name + "/", 0) == 0) v.seconds = secs;
    Log(name + ": " + std::to_string(bs.size()) + " boundaries in " + std::to_string(int(secs)) + " s");
  }
  rep_.seconds = Since(t0);
  return rep_;
}

Status Campaign::Done(const std::string& dir) {
  const bool keep = keep_dir_ || o_.keep_runs;
  keep_dir_ = false;
  return keep ? Status::Ok() : RemoveAll(dir);
}

Status Campaign::RunJobs(const VariantDef& d, const std::vector<Boundary>& bs) {
  for (size_t i = 0; i < bs.size(); ++i) {
    const std::string dir = JoinPath(o_.work_dir, "runs/" + d.name + "/" + std::to_string(i));
    CKPT_RETURN_IF_ERROR(RunOneJob(d, bs[i], dir));
    CKPT_RETURN_IF_ERROR(Done(dir));
  }
  return Status::Ok();
}

Status Campaign::RunOneJob(const VariantDef& d, const Boundary& b, const std::string& dir, int attempt) {
  const std::string root = JoinPath(dir, "root"), res = JoinPath(dir, "res"), power = JoinPath(dir, "power");
  const bool powercut = d.action == Action::kPowerCut;
  CKPT_RETURN_IF_ERROR(CloneTree(baseline_, root, Linker()));
  CKPT_RETURN_IF_ERROR(CreateDirs(DefaultEnv(), res));
  std::vector<std::string> args = SaveArgs(root, res, o_.new_iter);
  const std::string spec = SpecFor(d, b, o_.no_fsync);
  if (!spec.empty()) args.insert(args.end(), {"--spec", spec});
  if (powercut) {
    CKPT_RETURN_IF_ERROR(CreateDirs(DefaultEnv(), power));
    args.insert(args.end(), {"--power-dir", power});
  }
  // A hung rank never ends by itself; once every other rank has reported
  // (failed within its deadline, or finished a save the hang came after),
  // the job has shown what it can and is stopped.
  std::function<bool()> survivors_done;
  if (d.action == Action::kHang)
    survivors_done = [&] {
      for (int r = 0; r < rep_.world; ++r)
        if (r != b.rank && !PathExists(JoinPath(res, "rank_" + std::to_string(r) + ".json"))) return false;
      return true;
    };
  CKPT_ASSIGN_OR_RETURN(ProcResult pr, RunChildJob(o_.job, args, JoinPath(dir, "save"), JobLimit(1), o_.mpi_extra,
                                                   survivors_done));
  const std::string as_left = powercut ? d.name + "/as-left" : d.name;
  const bool acked = Acked(res);
  RunRecord rec{as_left, b, Outcome::kHang, acked, "", dir};
  if (pr.timed_out && attempt == 0 && d.action != Action::kHang) {
    rep_.reruns.push_back(d.name + " @ " + b.Name());
    CKPT_RETURN_IF_ERROR(RemoveAll(dir));
    return RunOneJob(d, b, dir, attempt + 1);
  }
  if (pr.timed_out) {
    rec.detail = "the faulted job did not end within " + std::to_string(int(JobLimit(1))) + " s" +
                 (attempt > 0 ? " (twice)" : "");
    Record(rec);
    return Status::Ok();
  }
  if (std::string why = FiredCheck(res, root, b); !why.empty()) {
    rec.outcome = Outcome::kMissed;
    rec.detail = why;
    Record(rec);
    return Status::Ok();
  }
  CKPT_ASSIGN_OR_RETURN(Recovery r, RecoverLatest(o_.job, o_.recover_layout, root, false, JoinPath(dir, "load")));
  rec.outcome = Judge(r, acked, &rec.detail);
  Record(rec);
  if (!powercut) return Status::Ok();
  return JudgePowerModes(b, dir, acked, o_.seed * 1000003 + uint64_t(++run_seq_) * 7919);
}

// The disk as the processes left it is snapshotted, then each power-loss
// mode is applied to a fresh copy of that snapshot and judged.
Status Campaign::JudgePowerModes(const Boundary& b, const std::string& dir, bool acked, uint64_t seed) {
  const std::string root = JoinPath(dir, "root"), snap = JoinPath(dir, "snap"), power = JoinPath(dir, "power");
  CKPT_RETURN_IF_ERROR(CloneTree(root, snap, Linker()));
  for (size_t i = 0; i < o_.power_modes.size(); ++i) {
    if (i > 0) {
      CKPT_RETURN_IF_ERROR(RemoveAll(root));
      CKPT_RETURN_IF_ERROR(CloneTree(snap, root, Linker()));
    }
    CKPT_ASSIGN_OR_RETURN(PowerLossMode mode, ParsePowerLossMode(o_.power_modes[i]));
    RunRecord rec{"powercut/" + o_.power_modes[i], b, Outcome::kError, acked, "", dir};
    auto applied = ApplyPowerLossDir(DefaultEnv(), power, mode, seed + i);
    if (!applied.ok()) return applied.status().WithContext("power loss for " + b.Name());
    CKPT_ASSIGN_OR_RETURN(Recovery r, RecoverLatest(o_.job, o_.recover_layout, root, false,
                                                    JoinPath(dir, "load-" + o_.power_modes[i])));
    rec.outcome = Judge(r, acked, &rec.detail);
    rec.detail += " (" + applied->ToString() + ")";
    Record(rec);
  }
  return Status::Ok();
}

Status Campaign::RunBatch(const VariantDef& d, const std::vector<Boundary>& bs) {
  const std::string dir = JoinPath(o_.work_dir, "runs/" + d.name);
  CKPT_RETURN_IF_ERROR(CreateDirs(DefaultEnv(), dir));
  std::string cases;
  for (size_t i = 0; i < bs.size(); ++i) {
    const std::string cdir = JoinPath(dir, std::to_string(i));
    CKPT_RETURN_IF_ERROR(CloneTree(baseline_, JoinPath(cdir, "root"), Linker()));
    CKPT_RETURN_IF_ERROR(CreateDirs(DefaultEnv(), JoinPath(cdir, "res")));
    cases += nlohmann::json{{"root", JoinPath(cdir, "root")}, {"result_dir", JoinPath(cdir, "res")},
                            {"spec", SpecFor(d, bs[i], o_.no_fsync)}}.dump() + "\n";
  }
  const std::string cases_path = JoinPath(dir, "cases.jsonl");
  CKPT_RETURN_IF_ERROR(WriteStringToFileSync(DefaultEnv(), cases_path, cases));
  std::vector<std::string> args = SaveArgs(JoinPath(dir, "unused"), dir, o_.new_iter);
  args.insert(args.end(), {"--cases", cases_path});
  CKPT_ASSIGN_OR_RETURN(ProcResult pr, RunChildJob(o_.job, args, JoinPath(dir, "batch"), JobLimit(int(bs.size())),
                                                   o_.mpi_extra));
  for (size_t i = 0; i < bs.size(); ++i) {
    const std::string cdir = JoinPath(dir, std::to_string(i)), res = JoinPath(cdir, "res");
    RunRecord rec{d.name, bs[i], Outcome::kHang, Acked(res), "", cdir};
    if (!PathExists(JoinPath(res, "rank_0.json"))) {
      rec.detail = pr.timed_out ? "the batch job did not end in time" : "the batch job ended before this case";
    } else if (std::string why = FiredCheck(res, JoinPath(cdir, "root"), bs[i]); !why.empty()) {
      rec.outcome = Outcome::kMissed;
      rec.detail = why;
    } else {
      CKPT_ASSIGN_OR_RETURN(Recovery r, RecoverLatest(o_.job, o_.recover_layout, JoinPath(cdir, "root"), false,
                                                      JoinPath(cdir, "load")));
      rec.outcome = Judge(r, rec.acked, &rec.detail);
    }
    Record(rec);
    CKPT_RETURN_IF_ERROR(Done(cdir));
  }
  return Status::Ok();
}

Status Campaign::RunDamage() {
  CKPT_ASSIGN_OR_RETURN(Manifest m, ReadManifest(DefaultEnv(), trace_root_, o_.new_iter));
  int index = 0;
  for (const auto& f : m.files) {
    for (const char* chunk : {"first", "mid", "last"}) CKPT_RETURN_IF_ERROR(DamageCase("bitflip", f.name, chunk, index++));
    CKPT_RETURN_IF_ERROR(DamageCase("truncate", f.name, "mid", index++));
    CKPT_RETURN_IF_ERROR(DamageCase("delete", f.name, "mid", index++));
  }
  for (const char* kind : {"bitflip", "truncate", "delete"}) CKPT_RETURN_IF_ERROR(DamageCase(kind, "manifest", "mid", index++));
  return Status::Ok();
}

Status Campaign::DamageCase(const std::string& kind, const std::string& file, const std::string& chunk, int index) {
  const std::string dir = JoinPath(o_.work_dir, "runs/damage/" + std::to_string(index)), root = JoinPath(dir, "root");
  CKPT_RETURN_IF_ERROR(CloneTree(trace_root_, root, Linker()));  // the new iteration is copied, never linked
  CKPT_ASSIGN_OR_RETURN(Action action, ParseAction(kind));
  CKPT_ASSIGN_OR_RETURN(DamageResult d, ApplyDamage(DefaultEnv(), root, o_.new_iter,
                                                    {action, file, chunk, uint64_t(index) * 77 + 5}));
  const std::string label = file == "manifest" ? "manifest-" + kind : kind;
  DamageStats& st = rep_.damage[label];
  ++st.runs;
  const bool flip = kind == "bitflip" && file != "manifest";
  // A deleted manifest is reported as its directory "has no manifest".
  const std::string where = file == "manifest" && kind == "delete" ? DirName(d.path) : d.path;
  auto named = [&](const std::string& msg, const std::string& file_part, const std::string& tensor, int64_t c) {
    return Contains(msg, file_part) && (!flip || (Contains(msg, tensor) && Contains(msg, "chunk " + std::to_string(c))));
  };
  // verify: an error Result (untrusted manifest) or an issue naming what was hit.
  auto vr = VerifyCheckpoint(DefaultEnv(), root, VerifyOptions{o_.new_iter, false, true});
  bool v_detected = !vr.ok() || !vr->ok(), v_named = !vr.ok() && Contains(vr.status().message(), where);
  if (vr.ok())
    for (const auto& issue : vr->issues)
      v_named = v_named || named(issue.ToString(), "'" + where + "'", "'" + d.tensor + "'", d.chunk);
  CKPT_ASSIGN_OR_RETURN(Recovery r, RecoverLatest(o_.job, o_.recover_layout, root, false, JoinPath(dir, "load")));
  // A load reads only the chunks its layout needs: damage in chunks of vocab
  // padding rows a smaller padding never asks for cannot change a loaded
  // value. Such a case must then be caught by a load under the saved layout,
  // which reads every chunk.
  std::string load_layout = o_.recover_layout;
  if (r.ok && r.mismatches == 0 && o_.recover_layout != o_.job.layout) {
    load_layout = o_.job.layout;
    CKPT_ASSIGN_OR_RETURN(r, RecoverLatest(o_.job, load_layout, root, false, JoinPath(dir, "load-saved-layout")));
    st.unread += !r.ok;
  }
  const bool l_detected = !r.ok && !r.hung;
  const bool l_named = l_detected && named(r.error, where, "'" + d.tensor + "'", d.chunk);
  CKPT_ASSIGN_OR_RETURN(Recovery fb, RecoverLatest(o_.job, load_layout, root, true, JoinPath(dir, "fallback")));
  const bool fb_old = fb.ok && fb.iteration == o_.old_iter && fb.mismatches == 0;
  st.verify_detected += v_detected;
  st.verify_named += v_named;
  st.load_detected += l_detected;
  st.load_named += l_named;
  st.fallback_old += fb_old;
  const bool torn = (r.ok && r.mismatches > 0) || (fb.ok && fb.mismatches > 0);
  const bool undetected = !v_detected || !l_detected;
  const bool failed = undetected || !v_named || !l_named || !fb_old;
  st.torn += torn;
  st.undetected += undetected;
  st.failed += failed && !torn;
  if (failed || torn) {
    RunRecord rec{"damage/" + label, {-1, "damage", index, file, kind}, torn ? Outcome::kTorn : Outcome::kMissed,
                  false, "", dir};
    rec.detail = d.ToString() + ": verify " + (v_detected ? (v_named ? "named it" : "did not name it") : "missed it") +
                 ", loader " + (l_detected ? (l_named ? "named it" : "did not name it: " + r.error) : "missed it") +
                 ", fallback " + (fb_old ? "old" : "NOT old: " + fb.error);
    Log("VIOLATION " + rec.variant + ": " + rec.detail);
    rep_.notable.push_back(std::move(rec));
    keep_dir_ = true;
  }
  return Done(dir);
}

}  // namespace ckpt::faults::internal
