// The `ckpt` subcommands' entry points: each command's options as a plain
// struct and the function that runs it. Every Run* prints its own report and
// errors (naming the rank where ranks differ) and returns a Status; main maps
// that Status to the process exit code once, with ExitCodeOf - no command
// picks an exit code itself.
// Parsing (CLI11) lives apart, in cli/flags_*.cc (cli/flags.h): CLI11 is
// header-only and costs ~10 s of compile time in every file that includes it,
// so only those files and main.cc do. The work is done by the libraries.
// save/load: cli/job_flags.h; train: cli/job_commands.h; the harness's
// commands (faults, scenario): harness/lab/lab_commands.h (ckpt-lab).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"
#include "ckpt/protocol/fingerprint.h"
#include "ckpt/protocol/verify.h"
#include "ckpt/workload/model_reshard.h"
#include "ckpt/workload/load_plan.h"

namespace ckpt::cli {

// Exit codes, the same for the same cause in every command (README "Exit
// codes"): 0 success; 1 the check failed - damaged data (kCorruption: a
// flipped bit, a torn file), verify problems, mismatching values, diff found
// differences, a save refused for NaN/Inf; 2 usage or operational error (bad
// input, IO error, missing checkpoint, timeout, an uncaught exception); 3 a
// save whose outcome is unknown (kOutcomeUnknown: the iteration is visible but
// its commit point, the root fsync, was not confirmed: check before relying on it).
inline constexpr int kExitOk = 0;
inline constexpr int kExitCheckFailed = 1;
inline constexpr int kExitError = 2;
inline constexpr int kExitOutcomeUnknown = 3;

// A command's Status that says "the command ran and what it checked failed"
// (verify found problems, diff found differences, values mismatch, a campaign
// found violations): phase Phase::kCheckFailed, exit 1 like damaged data.
inline Status CheckFailed(std::string what) { return Status(Code::kAborted, std::move(what), -1, Phase::kCheckFailed); }

// The one mapping from a command's Status to the process exit code (main.cc;
// typed fields, never its text): OK 0; kCorruption, the NaN/Inf guard's
// refusal and CheckFailed 1; anything else 2.
int ExitCodeOf(const Status& st);

// What --direct-io / --buffered-io ask of the commands that read chunks (load,
// verify; CLI11 makes them exclusive), else `otherwise` (CKPT_DIRECT_IO's
// choice: kAuto when unset).
inline DirectRead ReadModeOf(bool direct_io, bool buffered_io, DirectRead otherwise) {
  return direct_io ? DirectRead::kOn : buffered_io ? DirectRead::kOff : otherwise;
}

struct InspectFlags {
  std::string root;
  int64_t iteration = -1;
  bool json = false;
};
Status RunInspect(const InspectFlags& f);  // cmd_inspect.cc

struct VerifyFlags {
  std::string root;
  VerifyOptions opts;
  bool json = false, all_iterations = false, all_problems = false;
  bool direct_io = false, buffered_io = false;  // --direct-io / --buffered-io (exclusive; else opts.direct_io)
  bool no_progress = false;                      // --no-progress (cli/progress.h)
};
Status RunVerify(const VerifyFlags& f);  // cmd_verify.cc

struct FingerprintFlags {
  std::string root;
  FingerprintOptions opts;
  int64_t block_kb = 4096;
  bool per_tensor = false, json = false, no_verify = false;
  bool no_progress = false;  // --no-progress (cli/progress.h)
};
Status RunFingerprint(const FingerprintFlags& f);  // cmd_fingerprint.cc

struct DiffFlags {
  std::string a, b;
  FingerprintOptions opts_a, opts_b;
  bool json = false, no_progress = false;
};
Status RunDiff(const DiffFlags& f);  // cmd_fingerprint.cc

// Target by rules (any checkpoint; ckpt/protocol/rule_reshard.h) instead of
// a parallel layout under the recorded model family's rules (--to): --ranks N,
// --shard GLOB:axis=A:parts=P, --to-unsharded.
struct RuleTargetFlags {
  int ranks = 0;  // 0: not given
  std::vector<std::string> shard;
  bool to_unsharded = false;
  bool given() const { return ranks > 0 || !shard.empty() || to_unsharded; }
};

struct ReshardFlags {
  workload::ModelReshardRequest req;
  RuleTargetFlags rules;
  int64_t chunk_kb = 4096;
  bool json = false;
  bool no_progress = false;  // --no-progress (cli/progress.h)
};
Status RunReshard(const ReshardFlags& f);      // cmd_reshard.cc
Status RunRuleReshard(const ReshardFlags& f);  // cmd_rule_reshard.cc

struct PlanFlags {
  workload::LoadPlanRequest req;
  RuleTargetFlags rules;
  int64_t chunk_kb = 4096;
  bool json = false;
};
Status RunPlan(const PlanFlags& f);      // cmd_reshard.cc
Status RunRulePlan(const PlanFlags& f);  // cmd_rule_reshard.cc

struct ConvertFlags {
  std::string src, dst, to, layout = "tp=1", compression = "none", negative_control;
  int64_t iteration = -1, vocab_divisible_by = 128, chunk_kb = 4096;
  double max_shard_mb = 5120;
  bool mcore = false, stack_layers = false, extra_state = false, keep_padding = false, json = false;
  bool no_progress = false;  // --no-progress (cli/progress.h)
};
Status RunConvert(const ConvertFlags& f);  // cmd_convert.cc

Status RunGpu(bool as_json);  // cmd_gpu.cc

}  // namespace ckpt::cli
