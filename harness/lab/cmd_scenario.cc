// ckpt-lab scenario: the Level 8 question bank's evidence (seeds/level8/M1xx.md).
//
//   ckpt-lab scenario list [--json] [--scripts DIR]
//   ckpt-lab scenario run <id>... | --all  [--out DIR] [--reduced] [--json] [--keep] [--check-text] ...
//
// A thin wrapper: it executes the Python driver scripts/harness/scenario_runner.py
// (found from $CKPT_SCENARIO_RUNNER, the source tree this binary was built
// from, or a directory above the binary) as
//   python3 scenario_runner.py --ckpt <this binary> <the arguments after "scenario">
// The driver runs each scenario scripts/scenarios/<id>.py through the shared
// launcher (scripts/harness/launcher.py: one session per job, a deadline, every
// process of the job killed when it expires), judges the evidence and writes
// evidence.md / evidence.json; its exit code is this command's (0 all passed,
// 1 a scenario or its negative control failed, 2 usage error).
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ckpt/mpi/launcher_term.h"
#include "cli/commands.h"
#include "harness/lab/lab_commands.h"

namespace ckpt::cli {
namespace {

namespace fs = std::filesystem;
constexpr const char* kRunner = "scripts/harness/scenario_runner.py";

std::string SelfExe() {
  std::error_code ec;
  fs::path p = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// The driver: $CKPT_SCENARIO_RUNNER, the configured source tree, or a source
// tree above the binary (directly, or recorded in a build dir's CMakeCache.txt).
std::string FindRunner(std::vector<std::string>* tried) {
  auto ok = [&](const fs::path& p) {
    tried->push_back(p.string());
    std::error_code ec;
    return fs::is_regular_file(p, ec);
  };
  if (const char* env = std::getenv("CKPT_SCENARIO_RUNNER"); env && *env && ok(env)) return env;
#ifdef CKPT_SOURCE_DIR
  if (ok(fs::path(CKPT_SOURCE_DIR) / kRunner)) return (fs::path(CKPT_SOURCE_DIR) / kRunner).string();
#endif
  for (fs::path up = fs::path(SelfExe()).parent_path(); !up.empty() && up != up.root_path(); up = up.parent_path()) {
    if (ok(up / kRunner)) return (up / kRunner).string();
    std::ifstream cache(up / "CMakeCache.txt");
    const std::string key = "ckpt_SOURCE_DIR:STATIC=";
    for (std::string line; cache && std::getline(cache, line);)
      if (line.rfind(key, 0) == 0 && ok(fs::path(line.substr(key.size())) / kRunner))
        return (fs::path(line.substr(key.size())) / kRunner).string();
  }
  return "";
}

}  // namespace

Status RunScenario(const std::vector<std::string>& args) {
  std::vector<std::string> tried;
  const std::string runner = FindRunner(&tried);
  if (runner.empty()) {
    std::string why;
    for (const auto& t : tried) why += " " + t;
    std::fprintf(stderr, "ckpt scenario: cannot find %s; tried%s (set CKPT_SCENARIO_RUNNER)\n", kRunner, why.c_str());
    return Status::NotFound(std::string("cannot find ") + kRunner);
  }
  const char* py_env = std::getenv("PYTHON");
  const std::string python = py_env && *py_env ? py_env : "/usr/bin/python3";
  std::vector<std::string> argv = {python, runner, "--ckpt", SelfExe()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> c;
  for (auto& a : argv) c.push_back(a.data());
  c.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  RestoreSignalMaskForExec();  // the runner keeps the default SIGTERM (launcher_term.h)
  execv(python.c_str(), c.data());
  const std::string why = std::strerror(errno);
  std::fprintf(stderr, "ckpt scenario: cannot execute %s: %s\n", python.c_str(), why.c_str());
  return Status::IOError("cannot execute " + python + ": " + why);
}

}  // namespace ckpt::cli
