// The harness functions ckpt-lab installs into the product commands
// (cli/harness_seam.h): fault plans (faults/fault_env.h), the negative-control
// layouts and mappings (harness/negative_controls.h) and the async saver's
// test controls (harness/async_controls.h).
#include "harness/lab/seam.h"

#include <memory>
#include <utility>

#include "cli/job_flags.h"
#include "faults/fault_env.h"
#include "faults/fault_spec.h"
#include "harness/async_controls.h"
#include "harness/negative_controls.h"

namespace ckpt::cli {
namespace {

Result<FaultedEnv> MakeFaultEnv(Env* base, const FaultRequest& req) {
  CKPT_ASSIGN_OR_RETURN(faults::FaultPlan plan, faults::ParseFaultPlan(req.plan));
  faults::FaultEnv::Options o;
  o.rank = req.rank;
  o.plan = std::move(plan);
  o.root = req.root;
  o.event_log = req.event_log;
  auto env = std::make_unique<faults::FaultEnv>(base, std::move(o));
  FaultedEnv out;
  out.hook = env->Hook();  // refers to *env, which `out` owns
  out.env = std::move(env);
  return out;
}

Status NaiveShards(const JobFlags& f, workload::GptJob& j) {
  if (f.naive_fc1) {
    CKPT_ASSIGN_OR_RETURN(j.registered, testing::NaiveFc1Shards(j.model, j.layout, j.coords));
  }
  if (f.naive_layer_offset) {
    CKPT_ASSIGN_OR_RETURN(j.registered,
                          testing::ContiguousLayerKeys(j.model, j.layout, j.coords, std::move(j.registered)));
  }
  return Status::Ok();
}

void AsyncControls(AsyncSaver& saver, bool no_snapshot, Millis delay) {
  if (no_snapshot) testing::AsyncSaveControls::NoSnapshot(saver);
  testing::AsyncSaveControls::DelayBeforeSave(saver, delay);
}

}  // namespace

HarnessSeam LabSeam() {
  HarnessSeam seam;
  seam.fault_env = MakeFaultEnv;
  seam.naive_shards = NaiveShards;
  seam.async_controls = AsyncControls;
  seam.convert_links = testing::ConvertNegativeControl;
  return seam;
}

}  // namespace ckpt::cli
