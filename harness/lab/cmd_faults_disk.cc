// ckpt-lab faults powerloss / damage: apply a recorded power cut, or damage a
// committed checkpoint (faults/power_loss.h, faults/damage.h).
#include <cstdio>

#include "ckpt/base/env.h"
#include "cli/commands.h"
#include "harness/lab/lab_commands.h"
#include "faults/damage.h"
#include "faults/fault_spec.h"
#include "faults/power_loss.h"

namespace ckpt::cli {

using namespace ckpt::faults;

Status RunPowerLoss(const PowerLossFlags& f) {
  auto m = ParsePowerLossMode(f.mode);
  auto r = m.ok() ? ApplyPowerLossDir(DefaultEnv(), f.dir, *m, uint64_t(f.seed)) : Result<PowerLossReport>(m.status());
  if (!r.ok()) std::fprintf(stderr, "ckpt faults powerloss: %s\n", r.status().ToString().c_str());
  else std::printf("power loss (%s): %s\n", f.mode.c_str(), r->ToString().c_str());
  return r.status();
}

Status RunDamage(const DamageFlags& f) {
  auto kind = ParseAction(f.kind);
  DamageRequest r = f.req;
  r.kind = kind.ok() ? *kind : Action::kBitFlip;
  r.seed = uint64_t(f.seed);
  auto d = kind.ok() ? ApplyDamage(DefaultEnv(), f.root, f.iteration, r) : Result<DamageResult>(kind.status());
  if (!d.ok()) std::fprintf(stderr, "ckpt faults damage: %s\n", d.status().ToString().c_str());
  else std::printf("damaged (%s): %s\n", f.kind.c_str(), d->ToString().c_str());
  return d.status();
}

}  // namespace ckpt::cli
