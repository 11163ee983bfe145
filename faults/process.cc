#include "faults/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>

#include "ckpt/base/clock.h"

namespace ckpt::faults {
namespace {

using Clock = std::chrono::steady_clock;

void Redirect(const std::string& path, int fd) {
  int f = ::open(path.empty() ? "/dev/null" : path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (f >= 0) {
    ::dup2(f, fd);
    ::close(f);
  }
}

// Every descendant of `root` (from /proc). mpirun puts each rank in a
// process group of its own, so killing mpirun's group would orphan them.
std::vector<pid_t> Descendants(pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  DIR* d = ::opendir("/proc");
  if (!d) return {};
  while (struct dirent* e = ::readdir(d)) {
    pid_t pid = pid_t(std::atoi(e->d_name));
    if (pid <= 0) continue;
    std::ifstream in("/proc/" + std::string(e->d_name) + "/stat");
    std::string line;
    std::getline(in, line);
    size_t close = line.rfind(')');  // the command name may hold spaces
    if (close == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2) children[pid_t(ppid)].push_back(pid);
  }
  ::closedir(d);
  std::vector<pid_t> out, todo = {root};
  while (!todo.empty()) {
    pid_t p = todo.back();
    todo.pop_back();
    for (pid_t c : children[p]) {
      out.push_back(c);
      todo.push_back(c);
    }
  }
  return out;
}

// Kills `pid`, its group and all its descendants (found before anything dies,
// so none is reparented out of reach).
void KillTree(pid_t pid) {
  std::vector<pid_t> all = Descendants(pid);
  ::kill(pid, SIGKILL);
  ::kill(-pid, SIGKILL);
  for (pid_t p : all) ::kill(p, SIGKILL);
}

}  // namespace

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, size_t(n)) : std::string();
}

std::vector<std::string> SplitWords(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ' ' || c == '\t') {
      if (!cur.empty()) out.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

Result<ProcResult> RunProcess(const std::vector<std::string>& argv, const ProcOptions& opts) {
  if (argv.empty()) return Status::InvalidArgument("RunProcess: empty command");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto start = Clock::now();
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);  // orphaned ranks come back to us, not to init
  pid_t pid = ::fork();
  if (pid < 0) return Status::Internal("fork failed");
  if (pid == 0) {
    ::setpgid(0, 0);  // its own group: a timeout kills mpirun and every rank it started
    Redirect(opts.stdout_path, 1);
    Redirect(opts.stderr_path, 2);
    ::execvp(args[0], args.data());
    _exit(127);
  }
  ::setpgid(pid, pid);
  ProcResult r;
  auto elapsed = [&] { return Since(start); };
  double early_at = -1;
  int status = 0;
  for (;;) {
    pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    const double t = elapsed();
    if (early_at < 0 && opts.done_early && opts.done_early()) early_at = t;
    const bool early = early_at >= 0 && t >= early_at + opts.grace_s;
    if (t >= opts.timeout_s || early) {
      r.timed_out = !early;
      r.stopped_early = early;
      KillTree(pid);
      ::waitpid(pid, &status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  // Ranks left behind by an mpirun that exited early were reparented to us
  // (we are a child subreaper): kill and reap them.
  ::kill(-pid, SIGKILL);
  for (pid_t p : Descendants(::getpid())) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
  r.seconds = elapsed();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

}  // namespace ckpt::faults
