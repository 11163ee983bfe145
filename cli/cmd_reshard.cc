// ckpt reshard: rewrite a checkpoint under another layout, offline
//               (library: ckpt/workload/gpt_reshard.h).
// ckpt plan:    the read plan of a load under another layout, without data
//               (library: ckpt/workload/load_plan.h).
#include <cstdio>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/workload/gpt_reshard.h"
#include "ckpt/workload/load_plan.h"
#include "cli/commands.h"

namespace ckpt::cli {
namespace {

using nlohmann::json;

int Fail(const char* cmd, const Status& st) {
  std::fprintf(stderr, "ckpt %s: %s\n", cmd, st.ToString().c_str());
  return ExitCodeOf(st);
}

int RunReshard(const workload::GptReshardRequest& req, bool json_out) {
  auto r = workload::ReshardGptCheckpoint(req);
  if (!r.ok()) return Fail("reshard", r.status());
  const OfflineReshardStats& s = r->stats;
  json out = {{"op", "reshard"}, {"from", r->from_layout}, {"to", r->to_layout},
              {"iteration", s.src_iteration}, {"bytes_read", s.bytes_read},
              {"bytes_written", s.bytes_written}, {"seconds", s.seconds}};
  if (json_out) {
    std::printf("%s\n", out.dump().c_str());
  } else {
    std::printf("reshard iter %lld %s -> %s: read %.1f MB, wrote %.1f MB in %.3f s; committed under %s\n",
                static_cast<long long>(s.src_iteration), r->from_layout.dump().c_str(), r->to_layout.c_str(),
                s.bytes_read / 1e6, s.bytes_written / 1e6, s.seconds, req.dst.c_str());
  }
  return kExitOk;
}

int RunPlan(const workload::LoadPlanRequest& req, bool json_out) {
  auto plan = workload::PlanLoad(req);
  if (!plan.ok()) return Fail("plan", plan.status());
  std::fputs(json_out ? (plan->dump(1) + "\n").c_str() : workload::PlanText(*plan).c_str(), stdout);
  return kExitOk;
}

}  // namespace

void RegisterReshard(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("reshard", "Rewrite a checkpoint under another layout (offline, committed atomically)");
  auto f = std::make_shared<workload::GptReshardRequest>();
  auto chunk_kb = std::make_shared<int64_t>(4096);
  auto json_out = std::make_shared<bool>(false);
  cmd->add_option("src", f->src, "source checkpoint root")->required();
  cmd->add_option("dst", f->dst, "destination checkpoint root")->required();
  cmd->add_option("--to", f->to, "target layout, e.g. tp=2,pp=1,dp=1")->required();
  cmd->add_option("--iter", f->iteration, "source iteration (default: the latest: the newest committed one at or above the tracker's)");
  cmd->add_option("--compress", f->compression, "none or zstd");
  cmd->add_option("--chunk-kb", *chunk_kb, "target chunk size in KiB");
  cmd->add_option("--drop-object", f->drop_objects,
                  "leave out this per-rank object key (e.g. a (pp, tp)-grid RNG state under another TP); repeatable");
  cmd->add_flag("--json", *json_out, "machine-readable output");
  cmd->callback([=]() {
    f->chunk_bytes = *chunk_kb * 1024;
    *exit_code = RunReshard(*f, *json_out);
  });
}

void RegisterPlan(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand("plan", "Print the read plan of loading a checkpoint under another layout (no data read)");
  auto f = std::make_shared<workload::LoadPlanRequest>();
  auto chunk_kb = std::make_shared<int64_t>(4096);
  auto json_out = std::make_shared<bool>(false);
  cmd->add_option("root", f->root, "checkpoint root (or use --simulate)");
  cmd->add_option("--to", f->to, "target layout, e.g. tp=2,pp=1,dp=1")->required();
  cmd->add_option("--iter", f->iteration, "iteration (default: the latest: the newest committed one at or above the tracker's)");
  cmd->add_option("--simulate", f->simulate, "plan a checkpoint of this GPT preset that was never written (e.g. llama70b)");
  cmd->add_option("--from", f->from, "with --simulate: the layout it was saved with");
  cmd->add_option("--chunk-kb", *chunk_kb, "with --simulate: chunk size of the simulated files");
  cmd->add_flag("--per-rank", f->per_rank, "one line (or JSON entry) per target rank");
  cmd->add_flag("--json", *json_out, "machine-readable output");
  cmd->callback([=]() {
    f->chunk_bytes = *chunk_kb * 1024;
    *exit_code = RunPlan(*f, *json_out);
  });
}

}  // namespace ckpt::cli
