// Entry points of `ckpt-lab faults ...` (harness/lab/cmd_faults*.cc): the
// options as plain structs, each Run* returns the command's Status (the
// shared main, cli/cli_main.h, maps it to the exit code).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ckpt/base/status.h"
#include "faults/child.h"
#include "faults/damage.h"

namespace ckpt::cli {

// MCA choices that make the campaign's jobs faster here: 8 oversubscribed
// ranks start ~35% faster (0.69 s -> 0.43 s, ckpt needs only point-to-point
// MPI), and an aborted job is torn down at once instead of mpirun waiting
// odls_base_sigkill_timeout (1 s) between SIGTERM and SIGKILL.
inline constexpr const char* kFastMpi =
    "--mca pml ob1 --mca coll basic,self,libnbc --mca osc ^rdma,ucx --mca io ^ompio --mca odls_base_sigkill_timeout 0";

// ckpt-lab faults run / deadline (cmd_faults.cc).
struct FaultRunFlags {
  std::string work, layout = "tp=2,pp=2,dp=2", model = "tiny", recover = "tp=1", variants, modes = "drop,prefix,torn";
  std::string boundaries = "smart", points, ranks, mpirun, mpi_extra = kFastMpi, json_out, scenarios, child_ckpt;
  int64_t timeout_ms = 2000, chunk_kb = 16, seed = 1;
  std::string expect;  // negative control: outcomes that must occur
  bool no_fsync = false, no_hash_check = false, keep = false, quiet = false, in_place_commit = false;
};
Status RunCampaignCmd(const FaultRunFlags& f);
Status RunDeadlineCmd(const FaultRunFlags& f);

// ckpt-lab faults child (cmd_faults_child.cc): one rank of a faulted job; a failed
// rank ends the process itself (without MPI_Finalize).
struct FaultChildFlags : faults::ChildOptions {
  std::string phase;  // save | load
};
Status RunFaultChild(const FaultChildFlags& f);

// ckpt-lab faults powerloss / damage (cmd_faults_disk.cc).
struct PowerLossFlags {
  std::string dir, mode = "drop";
  int64_t seed = 1;
};
Status RunPowerLoss(const PowerLossFlags& f);

struct DamageFlags {
  std::string root, kind = "bitflip";
  faults::DamageRequest req;  // file, chunk (kind and seed come from the fields here)
  int64_t iteration = -1, seed = 0;
};
Status RunDamage(const DamageFlags& f);

// Runs scripts/harness/scenario_runner.py with every argument after "scenario" (cmd_scenario.cc).
Status RunScenario(const std::vector<std::string>& args);

}  // namespace ckpt::cli
