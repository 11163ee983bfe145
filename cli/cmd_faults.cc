// ckpt faults: fault injection across multi-rank jobs.
//
//   ckpt faults child --phase save|load ...   one rank of a faulted job (under mpirun)
//   ckpt faults run ...                       the campaign: trace, replay every fault, recover, check
//   ckpt faults deadline ...                  hung / killed ranks: detection latency, nothing committed
//   ckpt faults powerloss --dir D --mode M    apply a recorded power cut to the disk
//   ckpt faults damage --root R --file F ...  after-commit damage (bit flip, truncate, delete)
//
// child: cmd_faults_child.cc (work in faults/child.h); powerloss and damage:
// cmd_faults_disk.cc; run and deadline here. Everything else is the faults/ library.
#include <cstdio>
#include <cstdlib>

#include "ckpt/protocol/checkpoint.h"
#include "cli/commands.h"
#include "faults/campaign.h"
#include "faults/child.h"
#include "faults/deadline.h"
#include "faults/jobs.h"

namespace ckpt::cli {
namespace {

using namespace ckpt::faults;

// MCA choices that make the campaign's jobs faster here: 8 oversubscribed
// ranks start ~35% faster (0.69 s -> 0.43 s, ckpt needs only point-to-point
// MPI), and an aborted job is torn down at once instead of mpirun waiting
// odls_base_sigkill_timeout (1 s) between SIGTERM and SIGKILL.
constexpr const char* kFastMpi =
    "--mca pml ob1 --mca coll basic,self,libnbc --mca osc ^rdma,ucx --mca io ^ompio --mca odls_base_sigkill_timeout 0";

struct RunFlags {
  std::string work, layout = "tp=2,pp=2,dp=2", model = "tiny", recover = "tp=1", variants, modes = "drop,prefix,torn";
  std::string boundaries = "smart", points, ranks, mpirun, mpi_extra = kFastMpi, json_out, scenarios, child_ckpt;
  int64_t timeout_ms = 2000, chunk_kb = 16, seed = 1;
  std::string expect;  // negative control: outcomes that must occur
  bool no_fsync = false, no_hash_check = false, keep = false, quiet = false;
};

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  for (auto& w : SplitWords([&] { std::string t = s; for (char& c : t) c = c == ',' ? ' ' : c; return t; }())) out.push_back(w);
  return out;
}

JobEnv JobOf(const RunFlags& f) {
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

int RunCampaignCmd(const RunFlags& f) {
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
  o.seed = uint64_t(f.seed);
  o.keep_runs = f.keep;
  if (!f.quiet) o.log = Progress;
  auto rep = RunCampaign(o);
  if (!rep.ok()) {
    std::fprintf(stderr, "ckpt faults run: %s\n", rep.status().ToString().c_str());
    return kExitError;
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
    return all ? kExitOk : kExitCheckFailed;
  }
  return rep->violations() == 0 ? kExitOk : kExitCheckFailed;
}

int RunDeadlineCmd(const RunFlags& f) {
  DeadlineOptions o;
  o.job = JobOf(f);
  o.mpi_extra = SplitWords(f.mpi_extra);
  o.work_dir = f.work;
  for (const auto& s : SplitWords(f.scenarios)) {
    auto sc = ParseDeadlineScenario(s);
    if (!sc.ok()) {
      std::fprintf(stderr, "ckpt faults deadline: %s\n", sc.status().ToString().c_str());
      return kExitError;
    }
    o.scenarios.push_back(*sc);
  }
  if (!f.quiet) o.log = Progress;
  auto res = RunDeadlineChecks(o);
  if (!res.ok()) {
    std::fprintf(stderr, "ckpt faults deadline: %s\n", res.status().ToString().c_str());
    return kExitError;
  }
  std::printf("%s", DeadlineTable(*res, f.timeout_ms).c_str());
  for (const auto& r : *res)
    if (!r.problems.empty()) return kExitCheckFailed;
  return kExitOk;
}

void AddJobFlags(CLI::App* cmd, RunFlags* f) {
  cmd->add_option("--work", f->work, "scratch directory (wiped first)")->required();
  cmd->add_option("--layout", f->layout, "the faulted job's layout");
  cmd->add_option("--model", f->model, "GPT preset[:k=v,...]");
  cmd->add_option("--timeout-ms", f->timeout_ms, "deadline of every collective in the jobs");
  cmd->add_option("--mpirun", f->mpirun, "mpirun prefix before -np (default $CKPT_MPIRUN, $MPIRUN or a local one)");
  cmd->add_option("--mpi-extra", f->mpi_extra, "extra mpirun flags (default: faster MCA choices)");
  cmd->add_flag("--quiet", f->quiet, "no progress lines on stderr");
  cmd->add_option("--child-ckpt", f->child_ckpt,
                  "the ckpt executable the jobs run (default: this one; e.g. an older build, to compare)");
}

void RegisterRun(CLI::App* faults, int* exit_code) {
  auto* cmd = faults->add_subcommand("run", "Fault campaign: every boundary x rank x variant, recovered and checked");
  auto f = std::make_shared<RunFlags>();
  AddJobFlags(cmd, f.get());
  cmd->add_option("--variants", f->variants, "comma list (default powercut,eio,enospc-persist,short,damage; also "
                                             "crash,sigkill,hang,enospc,eio-persist,delay)");
  cmd->add_option("--power-modes", f->modes, "power-loss judgements of powercut runs: drop,prefix,torn");
  cmd->add_option("--boundaries", f->boundaries, "smart or all")->check(CLI::IsMember({"smart", "all"}));
  cmd->add_option("--points", f->points, "only these points (comma list; 'end' = after the job)");
  cmd->add_option("--ranks", f->ranks, "only these ranks (comma list)");
  cmd->add_option("--recover-layout", f->recover, "layout of the recovery load (world 1: no mpirun)");
  cmd->add_option("--chunk-kb", f->chunk_kb, "chunk size of the saves");
  cmd->add_option("--seed", f->seed, "power-loss choices");
  cmd->add_option("--json", f->json_out, "also write the report as JSON here");
  cmd->add_flag("--no-fsync", f->no_fsync, "negative control: Sync/SyncDir are no-ops in every job");
  cmd->add_flag("--no-hash-check", f->no_hash_check, "negative control: recovery loads skip chunk hashes, so "
                                                     "only the element check stands between damage and 'new'");
  cmd->add_option("--expect", f->expect, "negative control: exit 0 only if each listed outcome (e.g. lost,torn) occurred");
  cmd->add_flag("--keep", f->keep, "keep every run directory");
  cmd->callback([=]() { *exit_code = RunCampaignCmd(*f); });
}

void RegisterDeadline(CLI::App* faults, int* exit_code) {
  auto* cmd = faults->add_subcommand(
      "deadline", "Hung, killed and failing ranks: every survivor fails in time naming the rank, nothing committed");
  auto f = std::make_shared<RunFlags>();
  f->timeout_ms = 1000;
  AddJobFlags(cmd, f.get());
  cmd->add_option("--scenarios", f->scenarios,
                  "space-separated <save|load>:<hang|sigkill|eio>@<point>#<nth>:r<rank>=<phase>");
  cmd->callback([=]() { *exit_code = RunDeadlineCmd(*f); });
}

}  // namespace

void RegisterFaults(CLI::App& app, int* exit_code) {
  auto* faults = app.add_subcommand("faults", "Fault injection: campaigns, hung ranks, power loss, damage");
  faults->require_subcommand(1);
  RegisterFaultChild(faults, exit_code);
  RegisterRun(faults, exit_code);
  RegisterDeadline(faults, exit_code);
  RegisterFaultDiskTools(faults, exit_code);
}

}  // namespace ckpt::cli
