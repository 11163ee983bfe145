// ckpt-lab faults: fault injection across multi-rank jobs.
//
//   ckpt-lab faults child --phase save|load ...   one rank of a faulted job (under mpirun)
//   ckpt-lab faults run ...                       the campaign: trace, replay every fault, recover, check
//   ckpt-lab faults deadline ...                  hung / killed ranks: detection latency, nothing committed
//   ckpt-lab faults powerloss --dir D --mode M    apply a recorded power cut to the disk
//   ckpt-lab faults damage --root R --file F ...  after-commit damage (bit flip, truncate, delete)
//
// child: cmd_faults_child.cc (work in faults/child.h); powerloss and damage:
// cmd_faults_disk.cc; run and deadline here; options: harness/lab/faults_flags.cc.
// Everything else is the faults/ library.
#include <cstdio>
#include <cstdlib>

#include "ckpt/protocol/checkpoint.h"
#include "cli/commands.h"
#include "harness/lab/lab_commands.h"
#include "faults/campaign.h"
#include "faults/child.h"
#include "faults/deadline.h"
#include "faults/jobs.h"

namespace ckpt::cli {
namespace {

using namespace ckpt::faults;

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  for (auto& w : SplitWords([&] { std::string t = s; for (char& c : t) c = c == ',' ? ' ' : c; return t; }())) out.push_back(w);
  return out;
}

JobEnv JobOf(const FaultRunFlags& f) {
  JobEnv j;
  j.ckpt = f.child_ckpt.empty() ? SelfExe() : f.child_ckpt;
  j.mpirun = f.mpirun.empty() ? DefaultMpirun() : SplitWords(f.mpirun);
  j.model = f.model;
  j.layout = f.layout;
  j.timeout_ms = f.timeout_ms;
  j.chunk_kb = f.chunk_kb;
  j.verify_hashes = !f.no_hash_check;
  return j;
}

void Progress(const std::string& line) {
  std::fprintf(stderr, "ckpt faults: %s\n", line.c_str());
}

}  // namespace

Status RunCampaignCmd(const FaultRunFlags& f) {
  CampaignOptions o;
  o.job = JobOf(f);
  o.mpi_extra = SplitWords(f.mpi_extra);
  o.work_dir = f.work;
  o.recover_layout = f.recover;
  if (!f.variants.empty()) o.variants = SplitList(f.variants);
  o.power_modes = SplitList(f.modes);
  o.rule = f.boundaries == "all" ? BoundaryRule::kAll : BoundaryRule::kSmart;
  for (auto& p : SplitList(f.points)) o.points.insert(p);
  for (auto& r : SplitList(f.ranks)) o.ranks.insert(std::atoi(r.c_str()));
  o.no_fsync = f.no_fsync;
  o.in_place_commit = f.in_place_commit;
  o.seed = uint64_t(f.seed);
  o.keep_runs = f.keep;
  if (!f.quiet) o.log = Progress;
  auto rep = RunCampaign(o);
  if (!rep.ok()) {
    std::fprintf(stderr, "ckpt faults run: %s\n", rep.status().ToString().c_str());
    return rep.status();
  }
  std::printf("%s", rep->Table().c_str());
  if (!f.json_out.empty()) WriteEvidence(f.json_out, rep->ToJson().dump(1) + "\n");
  if (!f.expect.empty()) {
    bool all = true;
    for (const auto& name : SplitList(f.expect)) {
      int64_t n = 0;
      for (auto o : {Outcome::kOld, Outcome::kNew, Outcome::kError, Outcome::kTorn, Outcome::kLost, Outcome::kHang})
        if (OutcomeName(o) == name) n = rep->Count(o);
      if (name == "torn")
        for (const auto& [kind, d] : rep->damage) n += d.torn;
      std::printf("negative control: %lld %s state(s) found%s\n", static_cast<long long>(n), name.c_str(),
                  n > 0 ? ", as the checker must" : " - THE CHECKER FOUND NOTHING");
      all = all && n > 0;
    }
    return all ? Status::Ok() : CheckFailed("a negative control found nothing");
  }
  if (rep->violations() == 0) return Status::Ok();
  return CheckFailed(std::to_string(rep->violations()) + " violation(s)");
}

Status RunDeadlineCmd(const FaultRunFlags& f) {
  DeadlineOptions o;
  o.job = JobOf(f);
  o.mpi_extra = SplitWords(f.mpi_extra);
  o.work_dir = f.work;
  for (const auto& s : SplitWords(f.scenarios)) {
    auto sc = ParseDeadlineScenario(s);
    if (!sc.ok()) {
      std::fprintf(stderr, "ckpt faults deadline: %s\n", sc.status().ToString().c_str());
      return sc.status();
    }
    o.scenarios.push_back(*sc);
  }
  if (!f.quiet) o.log = Progress;
  auto res = RunDeadlineChecks(o);
  if (!res.ok()) {
    std::fprintf(stderr, "ckpt faults deadline: %s\n", res.status().ToString().c_str());
    return res.status();
  }
  std::printf("%s", DeadlineTable(*res, f.timeout_ms).c_str());
  for (const auto& r : *res)
    if (!r.problems.empty()) return CheckFailed("a deadline scenario has problems");
  return Status::Ok();
}

}  // namespace ckpt::cli
