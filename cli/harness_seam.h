// The product commands' one door for the harness. ckpt-lab (harness/lab)
// installs these functions before it parses its command line and registers
// the switches that use them (--faults, the negative controls, the async test
// hooks); the product `ckpt` installs nothing and registers none of those
// switches, so it links no harness code (tests/layering: product -> harness
// never). A flags field that asks for a harness function that is not
// installed is refused with FailedPrecondition (NoHarness), never ignored.
// Install once, before any command runs; read-only afterwards.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/base/env.h"
#include "ckpt/base/status.h"
#include "ckpt/base/timeout.h"
#include "ckpt/convert/convert.h"
#include "ckpt/protocol/async_save.h"
#include "ckpt/protocol/checkpoint.h"
#include "ckpt/workload/gpt_job.h"

namespace ckpt::cli {

struct JobFlags;  // cli/job_flags.h

// --faults: the Env that injects a fault plan's faults and its protocol step hook.
struct FaultRequest {
  std::string plan;  // fault plan text (faults/fault_spec.h)
  int rank = 0;
  std::string root;       // the checkpoint root, for damage actions
  std::string event_log;  // "" or a file that gets one JSON line per fired fault
};
struct FaultedEnv {
  std::unique_ptr<Env> env;  // wraps the `base` Env it was made over
  StepHook hook;             // SaveOptions::hook of the saves (empty for loads)
};

struct HarnessSeam {
  // Wraps `base` (which must outlive the result) in the plan's faults.
  std::function<Result<FaultedEnv>(Env* base, const FaultRequest& req)> fault_env;
  // save/load --naive-fc1, --naive-layer-offset: rewrites j.registered.
  std::function<Status(const JobFlags& f, workload::GptJob& j)> naive_shards;
  // train --async-no-snapshot, --async-delay-ms: set on the saver before its first Start.
  std::function<void(AsyncSaver& saver, bool no_snapshot, Millis delay)> async_controls;
  // convert --negative-control NAME: a wrong HF -> MCore mapping; empty for an unknown NAME.
  std::function<std::function<void(std::vector<convert::TensorLink>*)>(std::string_view name)> convert_links;
};

// ckpt-lab's main, before parsing. Not thread-safe; call once.
void InstallHarness(HarnessSeam seam);
// The installed seam (every function empty in the product).
const HarnessSeam& Harness();
// FailedPrecondition: `what` needs the harness program ckpt-lab.
Status NoHarness(const std::string& what);

}  // namespace ckpt::cli
