// Registers the conversion functions (ckpt/convert) on the _ckpt module.
#pragma once

#include <pybind11/pybind11.h>

#include "py_state.h"

namespace ckpt::py {
void DefineConvert(pybind11::module_& m);
}  // namespace ckpt::py
