// ckpt-lab: the harness program (built in the build tree, never installed).
// Every product command of `ckpt`, with the harness switches visible in its
// --help (negative controls, test hooks, fault plans), plus fault campaigns
// (`ckpt-lab faults ...`) and the Level 8 scenarios (`ckpt-lab scenario`).
// Tests, scenario scripts, seeds drivers, the Makefile demo and the benches
// call it where they need a harness switch; users run the installed `ckpt`.
#include "cli/flags.h"
#include "harness/lab/lab_flags.h"
#include "harness/lab/seam.h"

int main(int argc, char** argv) {
  using namespace ckpt::cli;
  InstallHarness(LabSeam());
  return CliMain(argc, argv,
                 Program{"ckpt-lab",
                         "ckpt-lab: the ckpt commands with the harness switches (negative controls, test hooks, "
                         "faults), fault campaigns and scenarios; build tree only, never installed",
                         RegisterLab});
}
