// Registers the local tier (ckpt/protocol/local_tier.h) on the _ckpt module:
// LocalSaver (the local save as a host snapshot, written, replicated,
// committed and - when due - drained to the global tier in the background:
// ckpt/protocol/local_async.h), choose_tier and local_restore;
// python/ckpt/_tiers.py wraps them.
#pragma once

#include <pybind11/pybind11.h>

namespace ckpt::py {
void DefineTiers(pybind11::module_& m);
}  // namespace ckpt::py
