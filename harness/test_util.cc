#include "harness/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
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

namespace {

CmdResult Run(const std::string& exe, const std::string& args) {
  const std::string cmd = std::string(CKPT_BINARY_DIR) + exe + " " + args + " 2>&1";
  CmdResult r;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace

CmdResult RunCkpt(const std::string& args) { return Run("/cli/ckpt", args); }

CmdResult RunCkptLab(const std::string& args) { return Run("/harness/lab/ckpt-lab", args); }

}  // namespace ckpt::testing
