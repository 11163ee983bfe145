// Shared helpers for tests: scratch directories under the build tree.
#pragma once

#include <string>

namespace ckpt::testing {

// A fresh empty directory, unique per call, removed at exit only if the test passed.
std::string ScratchDir(const std::string& name);

}  // namespace ckpt::testing
