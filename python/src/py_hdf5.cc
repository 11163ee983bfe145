#include "py_hdf5.h"

#include <H5PLpublic.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "py_state.h"

namespace ckpt::py {
namespace {

// The plugin path table of this libhdf5, in search order. HDF5 fills it once
// from HDF5_PLUGIN_PATH, or from its built-in default when that is unset.
std::vector<std::string> PluginPaths() {
  unsigned n = 0;
  if (H5PLsize(&n) < 0) Check(Status::Internal("H5PLsize failed"), 0, "hdf5 plugin path");
  std::vector<std::string> paths;
  for (unsigned i = 0; i < n; ++i) {
    const ssize_t len = H5PLget(i, nullptr, 0);
    if (len < 0) Check(Status::Internal("H5PLget failed"), 0, "hdf5 plugin path");
    std::string p(size_t(len) + 1, '\0');
    if (H5PLget(i, p.data(), p.size()) < 0) Check(Status::Internal("H5PLget failed"), 0, "hdf5 plugin path");
    p.resize(size_t(len));
    paths.push_back(std::move(p));
  }
  return paths;
}

// Puts `dir` first unless the table holds it already; returns the table after.
// First, not last: HDF5 1.10 stops its search with an error at a folder that
// does not exist, and its default (/usr/lib/.../hdf5/serial/plugins on
// Debian) usually does not.
std::vector<std::string> PrependPluginPath(const std::string& dir) {
  std::vector<std::string> paths = PluginPaths();
  for (const std::string& p : paths)
    if (p == dir) return paths;
  if (H5PLprepend(dir.c_str()) < 0)
    Check(Status::Internal("H5PLprepend(" + dir + ") failed"), 0, "hdf5 plugin path");
  paths.insert(paths.begin(), dir);
  return paths;
}

}  // namespace

void DefineHdf5(pybind11::module_& m) { m.def("hdf5_plugin_path_prepend", &PrependPluginPath); }

}  // namespace ckpt::py
