// ckpt faults powerloss / damage: apply a recorded power cut, or damage a
// committed checkpoint (faults/power_loss.h, faults/damage.h).
#include <cstdio>

#include "cli/commands.h"
#include "ckpt/base/env.h"
#include "faults/damage.h"
#include "faults/fault_spec.h"
#include "faults/power_loss.h"

namespace ckpt::cli {
namespace {

using namespace ckpt::faults;

void RegisterPowerLoss(CLI::App* faults, int* exit_code) {
  auto* cmd = faults->add_subcommand("powerloss", "Apply a recorded power cut (journals of --power-dir) to the disk");
  auto dir = std::make_shared<std::string>();
  auto mode = std::make_shared<std::string>("drop");
  auto seed = std::make_shared<int64_t>(1);
  cmd->add_option("--dir", *dir, "the jobs' --power-dir")->required();
  cmd->add_option("--mode", *mode, "drop, prefix or torn");
  cmd->add_option("--seed", *seed, "random choices of prefix/torn");
  cmd->callback([=]() {
    auto m = ParsePowerLossMode(*mode);
    auto r = m.ok() ? ApplyPowerLossDir(DefaultEnv(), *dir, *m, uint64_t(*seed)) : Result<PowerLossReport>(m.status());
    if (!r.ok()) std::fprintf(stderr, "ckpt faults powerloss: %s\n", r.status().ToString().c_str());
    else std::printf("power loss (%s): %s\n", mode->c_str(), r->ToString().c_str());
    *exit_code = r.ok() ? kExitOk : kExitError;
  });
}

void RegisterDamage(CLI::App* faults, int* exit_code) {
  auto* cmd = faults->add_subcommand("damage", "Damage a committed checkpoint: bit flip, truncate or delete a file");
  auto root = std::make_shared<std::string>();
  auto req = std::make_shared<DamageRequest>();
  auto kind = std::make_shared<std::string>("bitflip");
  auto iter = std::make_shared<int64_t>(-1);
  auto seed = std::make_shared<int64_t>(0);
  cmd->add_option("--root", *root, "checkpoint root")->required();
  cmd->add_option("--iter", *iter, "iteration (default: the tracker's)");
  cmd->add_option("--file", req->file, "shard file name in the iteration dir, or 'manifest'")->required();
  cmd->add_option("--kind", *kind, "bitflip, truncate or delete")->check(CLI::IsMember({"bitflip", "truncate", "delete"}));
  cmd->add_option("--chunk", req->chunk, "first, mid or last chunk of the file")->check(CLI::IsMember({"first", "mid", "last"}));
  cmd->add_option("--seed", *seed, "picks the byte and bit");
  cmd->callback([=]() {
    DamageRequest r = *req;
    r.kind = *ParseAction(*kind);
    r.seed = uint64_t(*seed);
    auto d = ApplyDamage(DefaultEnv(), *root, *iter, r);
    if (!d.ok()) std::fprintf(stderr, "ckpt faults damage: %s\n", d.status().ToString().c_str());
    else std::printf("damaged (%s): %s\n", kind->c_str(), d->ToString().c_str());
    *exit_code = d.ok() ? kExitOk : kExitError;
  });
}

}  // namespace

void RegisterFaultDiskTools(CLI::App* faults, int* exit_code) {
  RegisterPowerLoss(faults, exit_code);
  RegisterDamage(faults, exit_code);
}

}  // namespace ckpt::cli
