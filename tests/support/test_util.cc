#include "support/test_util.h"

#include <unistd.h>

#include <atomic>
#include <filesystem>

namespace ckpt::testing {

std::string ScratchDir(const std::string& name) {
  static std::atomic<int> counter{0};
  std::filesystem::path p = std::filesystem::path(CKPT_BINARY_DIR) / "scratch" /
                            (name + "." + std::to_string(getpid()) + "." + std::to_string(counter++));
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

}  // namespace ckpt::testing
