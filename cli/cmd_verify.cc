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

// Verifies one iteration (-1: latest), prints its report; the exit code.
int VerifyOne(const VerifyFlags& f, int64_t iteration, nlohmann::json* out) {
  VerifyOptions o = f.opts;
  o.iteration = iteration;
  o.stop_at_first = !f.all_problems;
  o.direct_io = ReadModeOf(f.direct_io, f.buffered_io, o.direct_io);
  CliProgress progress("verify", f.json, f.no_progress, 0, DefaultEnv(), /*count_writes=*/false, ".h5");
  progress.SetTotalsFromManifest(f.root, iteration);
  auto r = VerifyCheckpoint(progress.env(), f.root, o);
  progress.Finish();
  if (!r.ok()) {
    out->push_back({{"ok", false}, {"iteration", iteration}, {"error", r.status().ToString()}});
    std::fprintf(stderr, "ckpt verify: %s\n", r.status().ToString().c_str());
    // A manifest that fails its own hash is a failed check, not a usage error.
    return ExitCodeOf(r.status());
  }
  const double mbps = r->seconds > 0 ? double(r->bytes_checked) / 1e6 / r->seconds : 0;
  nlohmann::json j{{"ok", r->ok()}, {"iteration", r->iteration}, {"files", r->files_checked},
                   {"chunks", r->chunks_checked}, {"bytes", r->bytes_checked}, {"seconds", r->seconds},
                   {"mb_per_s", mbps}, {"issues", nlohmann::json::array()},
                   {"direct_io", {{"mode", DirectReadName(o.direct_io)}, {"direct_bytes", r->direct_read_bytes},
                                  {"files_cached", r->files_cached}}}};
  for (const auto& i : r->issues)
    j["issues"].push_back({{"file", i.file}, {"tensor", i.tensor}, {"dataset", i.dataset}, {"chunk", i.chunk},
                           {"problem", i.problem}});
  out->push_back(j);
  if (!f.json) {
    for (const auto& i : r->issues) std::printf("BAD %s\n", i.ToString().c_str());
    std::printf("%s: iteration %lld, %lld files, %lld chunks, %lld bytes in %.3f s (%.0f MB/s)\n",
                r->ok() ? "OK" : "FAILED", static_cast<long long>(r->iteration),
                static_cast<long long>(r->files_checked), static_cast<long long>(r->chunks_checked),
                static_cast<long long>(r->bytes_checked), r->seconds, mbps);
  }
  return r->ok() ? kExitOk : kExitCheckFailed;
}

}  // namespace

int RunVerify(const VerifyFlags& f) {
  nlohmann::json reports = nlohmann::json::array();
  int rc = kExitOk;
  if (!f.all_iterations) {
    rc = VerifyOne(f, f.opts.iteration, &reports);
  } else {
    auto iters = ListIterations(DefaultEnv(), f.root);
    if (!iters.ok() || iters->empty()) {
      std::fprintf(stderr, "ckpt verify: no iterations under '%s'%s\n", f.root.c_str(),
                   iters.ok() ? "" : (": " + iters.status().ToString()).c_str());
      return kExitError;
    }
    for (int64_t it : *iters) rc = std::max(rc, VerifyOne(f, it, &reports));
    if (!f.json) std::printf("%s: %zu iterations verified\n", rc == kExitOk ? "OK" : "FAILED", iters->size());
  }
  if (f.json && !f.all_iterations) std::printf("%s\n", reports[0].dump(2).c_str());
  if (f.json && f.all_iterations)
    std::printf("%s\n", nlohmann::json{{"ok", rc == kExitOk}, {"iterations", reports}}.dump(2).c_str());
  return rc;
}

}  // namespace ckpt::cli
