// ckpt reshard / plan by per-key rules (--ranks, --shard, --to-unsharded):
// any checkpoint, from its manifest's global shapes (library:
// ckpt/protocol/rule_reshard.h). `--to <layout>` takes the layout rules of
// the model family the checkpoint records (cmd_reshard.cc).
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "ckpt/protocol/rule_reshard.h"
#include "cli/commands.h"

namespace ckpt::cli {
namespace {

Status Fail(const char* cmd, const Status& st) {
  std::fprintf(stderr, "ckpt %s: %s\n", cmd, st.ToString().c_str());
  return st;
}

// The by-rules target of the flags; `to` is the family layout flag (exclusive).
Result<RuleLayout> TargetOf(const RuleTargetFlags& f, const std::string& to) {
  if (!to.empty())
    return Status::InvalidArgument("--to (a parallel layout) and --ranks/--shard/--to-unsharded exclude each other");
  if (!f.given())
    return Status::InvalidArgument("give the target: --to <layout> (checkpoints recording a model family), or for any checkpoint "
                                   "--ranks N [--shard KEY_GLOB:axis=A:parts=P ...], or --to-unsharded");
  if (f.to_unsharded && (f.ranks > 1 || !f.shard.empty()))
    return Status::InvalidArgument("--to-unsharded writes one rank of whole tensors: drop --ranks/--shard");
  return ParseRuleLayout(f.ranks > 0 ? f.ranks : 1, f.shard);
}

}  // namespace

Status RunRuleReshard(const ReshardFlags& f) {
  auto layout = TargetOf(f.rules, f.req.to);
  if (!layout.ok()) return Fail("reshard", layout.status());
  RuleReshardRequest req;
  req.src = f.req.src;
  req.dst = f.req.dst;
  req.iteration = f.req.iteration;
  req.layout = *layout;
  req.compression = f.req.compression;
  req.chunk_bytes = f.chunk_kb * 1024;
  req.drop_objects = f.req.drop_objects;
  auto s = ReshardByRules(req);
  if (!s.ok()) return Fail("reshard", s.status());
  const nlohmann::json to = layout->ToJson();
  if (f.json) {
    std::printf("%s\n", nlohmann::json({{"op", "reshard"}, {"to", to}, {"iteration", s->src_iteration},
                                        {"bytes_read", s->bytes_read}, {"bytes_written", s->bytes_written},
                                        {"seconds", s->seconds}})
                            .dump()
                            .c_str());
  } else {
    std::printf("reshard iter %lld -> %s: read %.1f MB, wrote %.1f MB in %.3f s; committed under %s\n",
                static_cast<long long>(s->src_iteration), to.dump().c_str(), s->bytes_read / 1e6,
                s->bytes_written / 1e6, s->seconds, req.dst.c_str());
  }
  return Status::Ok();
}

Status RunRulePlan(const PlanFlags& f) {
  auto layout = TargetOf(f.rules, f.req.to);
  if (!layout.ok()) return Fail("plan", layout.status());
  if (f.req.root.empty() || !f.req.simulate.empty())
    return Fail("plan", Status::InvalidArgument("a by-rules plan needs a checkpoint root (--simulate takes --to)"));
  auto plan = PlanByRules(f.req.root, f.req.iteration, *layout, f.req.per_rank);
  if (!plan.ok()) return Fail("plan", plan.status());
  std::fputs(f.json ? (plan->dump(1) + "\n").c_str() : RulePlanText(*plan).c_str(), stdout);
  return Status::Ok();
}

}  // namespace ckpt::cli
