// Shared helpers for tests: scratch directories under the build tree, the built command.
#pragma once

#include <string>

namespace ckpt::testing {

// A fresh empty directory, unique per call, removed at exit only if the test passed.
std::string ScratchDir(const std::string& name);

// The built `ckpt` command (CKPT_BINARY_DIR/cli/ckpt) run with `args` (a
// shell fragment): its exit code (-1 if it did not exit) and its stdout with
// stderr merged in.
struct CmdResult {
  int code = -1;
  std::string out;
};
CmdResult RunCkpt(const std::string& args);
// The same for the harness program (CKPT_BINARY_DIR/harness/lab/ckpt-lab).
CmdResult RunCkptLab(const std::string& args);

}  // namespace ckpt::testing
