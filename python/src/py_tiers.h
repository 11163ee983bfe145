// Registers the local tier (ckpt/protocol/local_tier.h) on the _ckpt module:
// local_save, choose_tier, local_restore and local_drain (the global save
// drained from the local copy); python/ckpt/_tiers.py wraps them.
#pragma once

#include <pybind11/pybind11.h>

namespace ckpt::py {
void DefineTiers(pybind11::module_& m);
}  // namespace ckpt::py
