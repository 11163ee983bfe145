// CliProgress and its terminal and JSON-lines sinks: see cli/progress.h.
#include "cli/progress.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>

#include <nlohmann/json.hpp>

namespace ckpt::cli {
namespace {

std::string Seconds(double s) {
  char buf[32];
  if (s < 0) return "?";
  if (s < 120) std::snprintf(buf, sizeof buf, "%.0f s", s);
  else std::snprintf(buf, sizeof buf, "%.0f min", s / 60);
  return buf;
}

// One line rewritten in place ("\r" + erase to the end of line).
class TerminalSink final : public ProgressSink {
 public:
  void OnProgress(const ProgressSnapshot& s) override {
    std::string line = s.op + (s.phase.empty() ? "" : " " + s.phase) + ": ";
    char buf[160];
    if (s.bytes_total > 0)
      std::snprintf(buf, sizeof buf, "%.1f/%.1f MB (%.0f%%)", s.bytes_done / 1e6, s.bytes_total / 1e6,
                    100.0 * double(s.bytes_done) / double(s.bytes_total));
    else
      std::snprintf(buf, sizeof buf, "%.1f MB", s.bytes_done / 1e6);
    line += buf;
    if (s.files_total > 0) line += ", " + std::to_string(s.files_done) + "/" + std::to_string(s.files_total) + " files";
    std::snprintf(buf, sizeof buf, ", %.1f MB/s", s.rate / 1e6);
    line += buf;
    line += s.final ? ", done in " + Seconds(s.elapsed_s) : ", ETA " + Seconds(s.eta_s);
    std::fprintf(stderr, "\r%s\x1b[K%s", line.c_str(), s.final ? "\n" : "");
    std::fflush(stderr);
  }
};

// One JSON object per line.
class JsonLinesSink final : public ProgressSink {
 public:
  void OnProgress(const ProgressSnapshot& s) override {
    nlohmann::json j{{"event", "progress"}, {"op", s.op}, {"phase", s.phase}, {"bytes_done", s.bytes_done},
                     {"bytes_total", s.bytes_total}, {"files_done", s.files_done}, {"files_total", s.files_total},
                     {"elapsed_s", s.elapsed_s}, {"rate", s.rate}, {"eta_s", s.eta_s}, {"final", s.final}};
    std::fprintf(stderr, "%s\n", j.dump().c_str());
    std::fflush(stderr);
  }
};

// Whether stdout and stderr are one file (`2>&1`, a shared pipe): then JSON
// progress lines would interleave with the --json document on stdout.
bool StderrIsStdout() {
  struct stat out {}, err {};
  return fstat(STDOUT_FILENO, &out) == 0 && fstat(STDERR_FILENO, &err) == 0 && out.st_dev == err.st_dev &&
         out.st_ino == err.st_ino;
}

}  // namespace

CliProgress::CliProgress(std::string op, bool json, bool off, int rank, Env* target, bool count_writes,
                         std::string file_suffix, bool start)
    : ProgressSession(std::move(op), target) {
  if (off || rank != 0) return;
  std::unique_ptr<ProgressSink> sink;
  if (json && !StderrIsStdout()) sink = std::make_unique<JsonLinesSink>();
  else if (json) return;  // merged into the JSON document's stream: keep stdout parseable
  else if (isatty(STDERR_FILENO)) sink = std::make_unique<TerminalSink>();
  else return;  // piped: quiet
  Attach(std::move(sink), count_writes, std::move(file_suffix));
  if (start) Start();
}

}  // namespace ckpt::cli
