// One rank of a faulted save or load job - the work of `ckpt faults child`
// (the campaign, faults/campaign.h, and the deadline checks run it under
// mpirun): a save of the job's GPT state through a FaultEnv (optionally over
// a power-loss journal), writing the rank's evidence (outcome, fired faults,
// commit acknowledgement, IO trace) for the runner; batches of such saves in
// one job; the state a load fills, with or without MPI.
//
// Failures are Status values naming the rank; the CLI decides how the process
// ends (faults children exit without MPI_Finalize). Not thread-safe.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "ckpt/workload/gpt_job.h"
#include "faults/fault_spec.h"

namespace ckpt::faults {

struct ChildOptions {
  std::string root, layout = "tp=1", model = "tiny", spec, spec_file, trace_dir, power_dir, result_dir, cases;
  int64_t iteration = -1, timeout_ms = 60000, chunk_kb = 16;
  bool fallback = false, no_hash_check = false;
  // save: commit in place (inplace_storage.h), the negative control of the atomic commit
  bool in_place_commit = false;
};

// Writes `text` to `path` directly (evidence for the runner, outside any Env
// under test); nothing for an empty path, best effort.
void WriteEvidence(const std::string& path, const std::string& text);
// Records failure `st` in a rank's result: "error" (its text) and its typed
// fields, which the runners judge by: "origin_rank"/"origin_phase" (when
// recorded) and "missing_ranks"/"missing_hosts"/"missing_phase" (a deadline
// failure's lost peers, when recorded).
void AddFailure(nlohmann::json* result, const Status& st);
// "<dir>/<stem><rank><ext>", or "" without a dir.
std::string RankFile(const std::string& dir, const char* stem, int rank, const char* ext);
// The fault plan of --spec-file plus --spec.
Result<FaultPlan> PlanOf(const ChildOptions& f);

// One save of the job's state (`model`, preset `name`) under `root` with
// `plan` on `comm`. Writes the rank's evidence into `result_dir` and returns
// the save's status.
Status SaveCase(workload::GptJob& j, const reshard::GptConfig& model, const std::string& name, const ChildOptions& f,
                const std::string& root, const std::string& result_dir, const FaultPlan& plan, Comm* comm);

// Batch mode: one case per line of the file f.cases ({"root", "result_dir",
// "spec"}), each with a fresh communicator so a failed case cannot skew the
// next one's message tags. A failed case is reported on stderr; only what
// stops the batch (unreadable cases, no communicator, the resync barrier)
// is returned. Only for faults no process dies or hangs of.
Status SaveCases(workload::GptJob& j, const reshard::GptConfig& model, const std::string& name, const ChildOptions& f,
                 const FaultPlan& base);

// The state a load fills: a GPT job under mpirun, or (world 1 outside mpirun)
// a local state without MPI, which starts much faster.
struct LoadRank {
  std::unique_ptr<workload::GptJob> job;
  std::unique_ptr<workload::GptLocalState> local;
  workload::GptLocalState* state = nullptr;
  Comm* comm = nullptr;
  int rank = 0;
};
Result<LoadRank> StartLoadRank(const std::string& layout, const reshard::GptConfig& model, const std::string& name);

}  // namespace ckpt::faults
