// ckpt-lab's command set: every product command (RegisterProduct,
// cli/main.cc) with the harness switches added where they apply, visible in
// --help under "Harness", plus the harness's own commands: `faults ...`
// (harness/lab/faults_flags.cc) and `scenario`. The switches fill fields of
// the product's flags structs; the product reaches the harness code they
// need only through cli/harness_seam.h (installed by lab_main.cc).
#include <memory>
#include <string>

#include "cli/commands.h"
#include "cli/flags.h"
#include "cli/job_commands.h"
#include "cli/job_flags.h"
#include "harness/lab/lab_commands.h"
#include "harness/lab/lab_flags.h"

namespace ckpt::cli {
namespace {

constexpr const char* kGroup = "Harness (ckpt-lab only: negative controls, test hooks, faults)";

// save and load: the negative-control layouts and a fault plan.
void AddJobSwitches(CLI::App* cmd, JobFlags* f, const char* faults_example) {
  cmd->add_flag("--naive-fc1", f->naive_fc1, "NEGATIVE CONTROL: register SwiGLU fc1 as a plain axis-0 slice")
      ->group(kGroup);
  cmd->add_flag("--naive-layer-offset", f->naive_layer_offset,
                "NEGATIVE CONTROL: key layers by a contiguous offset, ignoring VPP")
      ->group(kGroup);
  cmd->add_option("--faults", f->faults, std::string("fault plan (faults/fault_spec.h), e.g. ") + faults_example)
      ->group(kGroup);
}

// train: faults, a kill or stall after a save, NaN, the resume negative controls, the async controls.
void AddTrainSwitches(CLI::App* cmd, TrainFlags* f) {
  TrainSaveFlags* s = &f->save;
  cmd->add_option("--faults", s->faults,
                  "fault plan for the saves (faults/fault_spec.h; one fault Env for the job: nth counts over saves)")
      ->group(kGroup);
  cmd->add_option("--faults-log", s->faults_log, "append one JSON line per fired fault to this file")->group(kGroup);
  cmd->add_option("--kill-at", s->kill_at, "SIGKILL every rank after the saves of this iteration")->group(kGroup);
  cmd->add_option("--stall-at", s->stall_at, "every rank waits (300 s at most) after this iteration's saves")
      ->group(kGroup);
  cmd->add_flag("--async-no-snapshot", s->no_snapshot,
                "NEGATIVE CONTROL (never for real saves): the background save reads the live buffers")
      ->group(kGroup);
  cmd->add_option("--async-delay-ms", s->delay_ms,
                  "TEST HOOK: the background save sleeps this long before it reads or writes anything")
      ->group(kGroup);
  cmd->add_flag("--no-rng-state", f->no_rng, "NEGATIVE CONTROL: neither save nor load the RNG state")->group(kGroup);
  cmd->add_flag("--no-iterator-state", f->no_iterator, "NEGATIVE CONTROL: neither save nor load the iterator")
      ->group(kGroup);
  cmd->add_flag("--kill-after-save", f->kill_after_save, "SIGKILL every rank after the first save commits")
      ->group(kGroup);
  cmd->add_option("--inject-nan", f->inject_nan,
                  "fault: a NaN gradient at this iteration (decoder.layers.0.mlp.linear_fc2.weight, element 100)")
      ->group(kGroup);
}

void RegisterScenario(CLI::App& app, Status* outcome) {
  auto* cmd = app.add_subcommand(
      "scenario",
      "Level 8 question-bank scenarios (list | run IDS|--all [--reduced] [--out DIR] [--check-text]): measured "
      "evidence with negative controls; runs scripts/harness/scenario_runner.py (--help there)");
  cmd->prefix_command();  // every argument after "scenario" goes to the driver
  cmd->set_help_flag();   // so does --help
  cmd->callback([cmd, outcome]() { *outcome = RunScenario(cmd->remaining()); });
}

}  // namespace

void RegisterLab(CLI::App& app, Status* outcome) {
  ProductFlags f = RegisterProduct(app, outcome);
  AddJobSwitches(app.get_subcommand("save"), f.save.get(), "'point=env.pwrite rank=2 action=delay ms=50'");
  AddJobSwitches(app.get_subcommand("load"), f.load.get(), "'point=env.pread rank=2 action=delay ms=4000'");
  AddTrainSwitches(app.get_subcommand("train"), f.train.get());
  app.get_subcommand("convert")
      ->add_option("--negative-control", f.convert->negative_control,
                   "NEGATIVE CONTROL: a wrong mapping (naive-qkv, swap-gate-up) the oracle must catch")
      ->group(kGroup);
  RegisterFaults(app, outcome);
  RegisterScenario(app, outcome);
}

}  // namespace ckpt::cli
