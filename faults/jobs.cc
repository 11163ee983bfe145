#include "faults/jobs.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ckpt/base/env.h"
#include "reshard/parallel_state.h"

namespace ckpt::faults {
namespace fs = std::filesystem;

int WorldOf(const std::string& layout) {
  auto pc = ParallelConfig::Parse(layout);
  return pc.ok() ? pc->world_size() : 0;
}

std::vector<std::string> DefaultMpirun() {
  for (const char* var : {"CKPT_MPIRUN", "MPIRUN"})
    if (const char* v = std::getenv(var); v && *v) return SplitWords(v);
  return SplitWords("mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader");
}

Result<ProcResult> RunChildJob(const JobEnv& env, const std::vector<std::string>& args,
                               const std::string& log_prefix, double timeout_s,
                               const std::vector<std::string>& mpi_extra, std::function<bool()> done_early) {
  std::vector<std::string> argv = env.mpirun;
  argv.insert(argv.end(), mpi_extra.begin(), mpi_extra.end());
  argv.insert(argv.end(), {"-np", std::to_string(WorldOf(env.layout)), env.ckpt, "faults", "child"});
  argv.insert(argv.end(), args.begin(), args.end());
  ProcOptions po;
  po.timeout_s = timeout_s;
  po.stdout_path = log_prefix + ".out";
  po.stderr_path = log_prefix + ".err";
  po.done_early = std::move(done_early);
  return RunProcess(argv, po);
}

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// The last line of `text` that mentions `needle` (the child's error line).
std::string LastLineWith(const std::string& text, const std::string& needle) {
  std::string best, line;
  for (size_t pos = 0; pos <= text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    line = text.substr(pos, nl - pos);
    if (line.find(needle) != std::string::npos) best = line;
    pos = nl + 1;
  }
  return best;
}

}  // namespace

Result<Recovery> RecoverLatest(const JobEnv& env, const std::string& layout, const std::string& root, bool fallback,
                               const std::string& log_prefix) {
  std::vector<std::string> args = {"--phase", "load", "--root", root, "--layout", layout, "--model", env.model,
                                   "--timeout-ms", std::to_string(env.timeout_ms)};
  if (fallback) args.push_back("--fallback");
  if (!env.verify_hashes) args.push_back("--no-hash-check");
  const double limit = 60;
  ProcResult pr;
  if (WorldOf(layout) == 1) {
    std::vector<std::string> argv = {env.ckpt, "faults", "child"};
    argv.insert(argv.end(), args.begin(), args.end());
    ProcOptions po;
    po.timeout_s = limit;
    po.stdout_path = log_prefix + ".out";
    po.stderr_path = log_prefix + ".err";
    CKPT_ASSIGN_OR_RETURN(pr, RunProcess(argv, po));
  } else {
    JobEnv e = env;
    e.layout = layout;
    CKPT_ASSIGN_OR_RETURN(pr, RunChildJob(e, args, log_prefix, limit));
  }
  Recovery r;
  if (pr.timed_out) {
    r.hung = true;
    return r;
  }
  const std::string out = ReadAll(log_prefix + ".out");
  const std::string line = LastLineWith(out, "\"ok\"");
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (!line.empty() && j.is_object()) {
    r.ok = j.value("ok", false);
    r.iteration = j.value("iteration", int64_t(-1));
    r.mismatches = j.value("mismatches", int64_t(0));
    r.first_bad = j.value("first_bad", std::string());
    r.error = j.value("error", std::string());
    if (j.contains("skipped")) r.skipped = j["skipped"].get<std::vector<std::string>>();
  }
  if (!r.ok && r.error.empty()) {
    r.error = LastLineWith(ReadAll(log_prefix + ".err"), "ckpt faults child");
    if (r.error.empty()) r.error = "load exited with status " + std::to_string(pr.exit_code) + " and no message";
  }
  return r;
}

Status CloneTree(const std::string& src, const std::string& dst, const std::function<bool(const std::string&)>& link) {
  std::error_code ec;
  fs::create_directories(dst, ec);
  if (ec) return Status::IOError("mkdir '" + dst + "': " + ec.message());
  for (auto it = fs::recursive_directory_iterator(src, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string rel = fs::relative(it->path(), src, ec).string();
    const fs::path to = fs::path(dst) / rel;
    const bool is_dir = it->is_directory(ec);
    if (ec) break;
    if (is_dir) {
      fs::create_directory(to, ec);
    } else if (link && link(rel)) {
      fs::create_hard_link(it->path(), to, ec);
    } else {
      fs::copy_file(it->path(), to, ec);
    }
    if (ec) return Status::IOError("clone '" + it->path().string() + "' -> '" + to.string() + "': " + ec.message());
  }
  if (ec) return Status::IOError("clone '" + src + "': " + ec.message());
  return Status::Ok();
}

Status RemoveAll(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) return Status::IOError("rm -r '" + path + "': " + ec.message());
  return Status::Ok();
}

Status PrepareWorkDir(const std::string& dir) {
  constexpr const char* kMarker = ".ckpt-faults-work";
  std::error_code ec;
  if (dir.empty()) return Status::InvalidArgument("no work directory given");
  // "baseline/" marks work dirs of runs made before the marker existed.
  const bool ours = fs::exists(fs::path(dir) / kMarker, ec) || fs::is_directory(fs::path(dir) / "baseline", ec);
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec) && !ours)
    return Status::FailedPrecondition("refusing to wipe '" + dir + "': not empty and not a ckpt faults work directory");
  CKPT_RETURN_IF_ERROR(RemoveAll(dir));
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("mkdir '" + dir + "': " + ec.message());
  return WriteStringToFileSync(DefaultEnv(), (fs::path(dir) / kMarker).string(), "");
}

std::vector<nlohmann::json> ReadJsonLines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) out.push_back(std::move(j));
  }
  return out;
}

bool PathExists(const std::string& path) {
  std::error_code ec;
  return fs::exists(path, ec);
}

}  // namespace ckpt::faults
