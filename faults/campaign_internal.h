// Internals of RunCampaign shared by campaign.cc (setup, judging) and
// campaign_run.cc (the replay loops). Not a public interface.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "faults/campaign.h"
#include "faults/fault_spec.h"

namespace ckpt::faults::internal {

enum class Applies { kAny, kAnyOrEnd, kSteps, kWrites };

struct VariantDef {
  std::string name;
  Action action;
  bool persistent;
  bool batched;  // no process dies: many cases share one mpirun
  Applies applies;
};

const std::vector<VariantDef>& Defs();
bool AppliesTo(const VariantDef& d, const Boundary& b);
std::string SpecFor(const VariantDef& d, const Boundary& b, bool no_fsync);

class Campaign {
 public:
  explicit Campaign(const CampaignOptions& opts);
  Result<CampaignReport> Run();

 private:
  void Log(const std::string& line) const;
  bool LinkOld(const std::string& rel) const;
  std::function<bool(const std::string&)> Linker() const;
  std::vector<std::string> SaveArgs(const std::string& root, const std::string& res, int64_t iter) const;
  double JobLimit(int cases) const;

  Status Prepare();
  Result<std::vector<std::vector<TraceEntry>>> RecordTrace(const std::string& name, std::string* root);
  Status Trace();

  Status RunJobs(const VariantDef& d, const std::vector<Boundary>& bs);
  // attempt 0 re-runs itself once if the job outlives its limit (see CampaignReport::reruns).
  Status RunOneJob(const VariantDef& d, const Boundary& b, const std::string& dir, int attempt = 0);
  Status JudgePowerModes(const Boundary& b, const std::string& dir, bool acked, uint64_t seed);
  Status RunBatch(const VariantDef& d, const std::vector<Boundary>& bs);
  Status RunDamage();
  Status DamageCase(const std::string& kind, const std::string& file, const std::string& chunk, int index);

  Outcome Judge(const Recovery& r, bool acked, std::string* detail) const;
  VariantStats& Stats(const std::string& variant);
  void Record(RunRecord rec);
  // "" if the boundary's fault fired on the traced operation, else why not.
  std::string FiredCheck(const std::string& res, const std::string& root, const Boundary& b) const;
  bool Acked(const std::string& res) const;
  Status Done(const std::string& dir);  // removes a run dir unless it must be kept

  const CampaignOptions& o_;
  CampaignReport rep_;
  std::map<std::string, size_t> stats_index_;
  std::string baseline_, trace_root_;
  std::vector<std::vector<TraceEntry>> traces_;
  bool keep_dir_ = false;  // the current run showed a violation
  int64_t run_seq_ = 0;     // seeds the power-loss choices of each run
};

}  // namespace ckpt::faults::internal
