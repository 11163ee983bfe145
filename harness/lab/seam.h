// The harness seam as ckpt-lab fills it (cli/harness_seam.h): every function
// set, backed by faults/ and the harness library.
#pragma once

#include "cli/harness_seam.h"

namespace ckpt::cli {

HarnessSeam LabSeam();  // seam.cc

}  // namespace ckpt::cli
