// Registers hdf5_plugin_path_prepend on the _ckpt module: puts the package's
// HDF5 plugin folder (ckpt/hdf5-plugins, the zstd filter 32015) on the plugin
// path of the libhdf5 this extension links, so h5py in the same process reads
// compressed shards without HDF5_PLUGIN_PATH (python/ckpt/_hdf5.py).
#pragma once

#include <pybind11/pybind11.h>

namespace ckpt::py {
void DefineHdf5(pybind11::module_& m);
}  // namespace ckpt::py
