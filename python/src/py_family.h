// Registers the model-family rules (reshard/family.h) on the _ckpt module:
// the registered family names and the ShardedTensor descriptors of a rank, so
// Python callers (examples/torch_gpt, torch_bridge) need not copy the rules.
#pragma once

#include <pybind11/pybind11.h>

namespace ckpt::py {
void DefineFamily(pybind11::module_& m);
}  // namespace ckpt::py
