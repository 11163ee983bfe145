// The harness seam (see harness_seam.h).
#include "cli/harness_seam.h"

#include <utility>

namespace ckpt::cli {
namespace {

HarnessSeam& Installed() {
  static HarnessSeam seam;
  return seam;
}

}  // namespace

void InstallHarness(HarnessSeam seam) { Installed() = std::move(seam); }

const HarnessSeam& Harness() { return Installed(); }

Status NoHarness(const std::string& what) {
  return Status::FailedPrecondition(what +
                                    " is a harness switch: run it with ckpt-lab (the build tree's "
                                    "harness program), not the installed ckpt");
}

}  // namespace ckpt::cli
