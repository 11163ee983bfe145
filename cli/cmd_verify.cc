// ckpt verify: re-hash everything; report the first (or every) bad file/tensor/chunk,
// of the latest iteration, one given, or every iteration (--all).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/checkpoint.h"
#include "ckpt/protocol/verify.h"
#include "cli/commands.h"
#include "cli/progress.h"

namespace ckpt::cli {
namespace {

VerifyOptions OptionsOf(const VerifyFlags& f, int64_t iteration) {
  VerifyOptions o = f.opts;
  o.iteration = iteration;
  o.stop_at_first = !f.all_problems;
  o.direct_io = ReadModeOf(f.direct_io, f.buffered_io, o.direct_io);
  return o;
}

// An iteration whose manifest could not be trusted: its JSON entry, the
// message on stderr; its outcome.
Status ReportError(int64_t iteration, const Status& st, nlohmann::json* out) {
  out->push_back({{"ok", false}, {"iteration", iteration}, {"error", st.ToString()}});
  std::fprintf(stderr, "ckpt verify: %s\n", st.ToString().c_str());
  // A manifest that fails its own hash is a failed check (kCorruption), not a usage error.
  return st;
}

// Prints one report; its outcome. An iteration removed while it was checked
// is not damage: OK among --all's iterations (`single` false), else kNotFound
// (exit 2: it could not be verified, it is gone).
Status Report(const VerifyFlags& f, const VerifyOptions& o, const VerifyReport& r, bool single, nlohmann::json* out) {
  const double mbps = r.seconds > 0 ? double(r.bytes_checked) / 1e6 / r.seconds : 0;
  nlohmann::json j{{"ok", r.ok()}, {"iteration", r.iteration}, {"files", r.files_checked},
                   {"chunks", r.chunks_checked}, {"bytes", r.bytes_checked}, {"seconds", r.seconds},
                   {"mb_per_s", mbps}, {"issues", nlohmann::json::array()}, {"removed", r.removed},
                   {"notes", r.notes},
                   {"direct_io", {{"mode", DirectReadName(o.direct_io)}, {"direct_bytes", r.direct_read_bytes},
                                  {"files_cached", r.files_cached}}}};
  for (const auto& i : r.issues)
    j["issues"].push_back({{"file", i.file}, {"tensor", i.tensor}, {"dataset", i.dataset}, {"chunk", i.chunk},
                           {"problem", i.problem}});
  out->push_back(j);
  if (!f.json) {
    for (const auto& n : r.notes) std::printf("NOTE %s\n", n.c_str());
    for (const auto& i : r.issues) std::printf("BAD %s\n", i.ToString().c_str());
    if (r.removed)
      std::printf("REMOVED: iteration %lld was removed while it was verified (not damage)\n",
                  static_cast<long long>(r.iteration));
    else
      std::printf("%s: iteration %lld, %lld files, %lld chunks, %lld bytes in %.3f s (%.0f MB/s)\n",
                  r.ok() ? "OK" : "FAILED", static_cast<long long>(r.iteration),
                  static_cast<long long>(r.files_checked), static_cast<long long>(r.chunks_checked),
                  static_cast<long long>(r.bytes_checked), r.seconds, mbps);
  }
  if (r.removed)
    return single ? Status::NotFound("iteration " + std::to_string(r.iteration) + " was removed while it was verified")
                  : Status::Ok();
  if (r.ok()) return Status::Ok();
  return CheckFailed("iteration " + std::to_string(r.iteration) + ": " + std::to_string(r.issues.size()) +
                     " problem(s)");
}

// Keeps the outcome with the higher exit code: an error (2) outranks a failed check (1).
void KeepWorst(Status* worst, Status st) {
  if (ExitCodeOf(st) > ExitCodeOf(*worst)) *worst = std::move(st);
}

Status VerifyAll(const VerifyFlags& f) {
  const VerifyOptions o = OptionsOf(f, -1);
  CliProgress progress("verify", f.json, f.no_progress, 0, DefaultEnv(), /*count_writes=*/false, ".h5");
  auto all = VerifyAllIterations(progress.env(), f.root, o);  // totals unknown: bytes and files so far
  progress.Finish();
  if (!all.ok()) {
    std::fprintf(stderr, "ckpt verify: %s\n", all.status().ToString().c_str());
    return all.status();
  }
  nlohmann::json reports = nlohmann::json::array();
  Status worst;
  for (const auto& it : all->iterations)
    KeepWorst(&worst, it.error.ok() ? Report(f, o, it.report, false, &reports)
                                    : ReportError(it.iteration, it.error, &reports));
  // What `verify` and `load` of the latest would fail on (a garbage tracker):
  // the three agree.
  if (!all->latest.ok()) {
    std::fprintf(stderr, "ckpt verify: latest: %s\n", all->latest.ToString().c_str());
    KeepWorst(&worst, all->latest);
  }
  if (f.json) {
    nlohmann::json j{{"ok", worst.ok()}, {"iterations", reports}};
    j["latest"] = all->latest.ok() ? nlohmann::json(nullptr) : nlohmann::json(all->latest.ToString());
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s: %zu iterations verified\n", worst.ok() ? "OK" : "FAILED", all->iterations.size());
  }
  return worst;
}

}  // namespace

Status RunVerify(const VerifyFlags& f) {
  if (f.all_iterations) return VerifyAll(f);
  nlohmann::json reports = nlohmann::json::array();
  const VerifyOptions o = OptionsOf(f, f.opts.iteration);
  CliProgress progress("verify", f.json, f.no_progress, 0, DefaultEnv(), /*count_writes=*/false, ".h5");
  progress.SetTotalsFromManifest(f.root, f.opts.iteration);
  auto r = VerifyCheckpoint(progress.env(), f.root, o);
  progress.Finish();
  Status st = r.ok() ? Report(f, o, *r, true, &reports) : ReportError(f.opts.iteration, r.status(), &reports);
  if (f.json) std::printf("%s\n", reports[0].dump(2).c_str());
  return st;
}

}  // namespace ckpt::cli
