// ckpt verify: re-hash everything; report the first (or every) bad file/tensor/chunk.
#include <cstdio>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/verify.h"
#include "cli/commands.h"

namespace ckpt::cli {

void RegisterVerify(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("verify", "Re-read and re-hash every chunk of a checkpoint (exit 0 ok, 1 bad)");
  auto root = std::make_shared<std::string>();
  auto opts = std::make_shared<VerifyOptions>();
  auto json = std::make_shared<bool>(false);
  auto all = std::make_shared<bool>(false);
  cmd->add_option("root", *root, "checkpoint root directory")->required();
  cmd->add_option("--iter", opts->iteration, "iteration (default: the latest: the newest committed one at or above the tracker's)");
  cmd->add_flag("--all", *all, "report every problem, not only the first");
  cmd->add_flag("--json", *json, "machine-readable output");
  cmd->callback([=]() {
    opts->stop_at_first = !*all;
    auto r = VerifyCheckpoint(DefaultEnv(), *root, *opts);
    if (!r.ok()) {
      if (*json)
        std::printf("%s\n", nlohmann::json{{"ok", false}, {"error", r.status().ToString()}}.dump(2).c_str());
      std::fprintf(stderr, "ckpt verify: %s\n", r.status().ToString().c_str());
      // A manifest that fails its own hash is a failed check, not a usage error.
      *exit_code = r.status().code() == Code::kCorruption ? kExitCheckFailed : kExitError;
      return;
    }
    const double mbps = r->seconds > 0 ? double(r->bytes_checked) / 1e6 / r->seconds : 0;
    if (*json) {
      nlohmann::json j{{"ok", r->ok()}, {"iteration", r->iteration}, {"files", r->files_checked},
                       {"chunks", r->chunks_checked}, {"bytes", r->bytes_checked}, {"seconds", r->seconds},
                       {"mb_per_s", mbps}, {"issues", nlohmann::json::array()}};
      for (const auto& i : r->issues)
        j["issues"].push_back({{"file", i.file}, {"tensor", i.tensor}, {"dataset", i.dataset}, {"chunk", i.chunk},
                               {"problem", i.problem}});
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      for (const auto& i : r->issues) std::printf("BAD %s\n", i.ToString().c_str());
      std::printf("%s: iteration %lld, %lld files, %lld chunks, %lld bytes in %.3f s (%.0f MB/s)\n",
                  r->ok() ? "OK" : "FAILED", static_cast<long long>(r->iteration),
                  static_cast<long long>(r->files_checked), static_cast<long long>(r->chunks_checked),
                  static_cast<long long>(r->bytes_checked), r->seconds, mbps);
    }
    *exit_code = r->ok() ? kExitOk : kExitCheckFailed;
  });
}

}  // namespace ckpt::cli
