"""HDF5 plugin path for h5py: `import ckpt` makes zstd-compressed shards readable.

ckpt ships its HDF5 filter 32015 (zstd) as a plugin inside the package
(ckpt/hdf5-plugins/libckpt_h5zstd.so; a wheel, `make install` and the build
tree all carry it). HDF5 looks for plugins on a path table it fills once from
HDF5_PLUGIN_PATH (or its built-in default), so three places need the folder:
- the libhdf5 the extension links (Debian's h5py shares it): appended at run
  time (H5PLappend, python/src/py_hdf5.cc);
- a libhdf5 not yet started (another copy, e.g. in a pip h5py wheel, or a
  child process such as h5dump): HDF5_PLUGIN_PATH set to the same table (the
  user's path or HDF5's default, then ckpt's folder), unless it names it;
- an h5py imported before ckpt with its own libhdf5: h5py.h5pl.append.
"""
import os
import sys

from . import _ckpt

PLUGIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hdf5-plugins")


def add_plugin_path():
    """Puts PLUGIN_DIR on every HDF5 plugin path in reach; returns the extension's table."""
    if not os.path.isdir(PLUGIN_DIR):
        return []  # a package without the plugin (a partial build): nothing to add
    table = _ckpt.hdf5_plugin_path_append(PLUGIN_DIR)
    env = os.environ.get("HDF5_PLUGIN_PATH")
    if env is None or PLUGIN_DIR not in env.split(os.pathsep):
        os.environ["HDF5_PLUGIN_PATH"] = os.pathsep.join(table)
    h5py = sys.modules.get("h5py")
    if h5py is not None:
        from h5py import h5pl  # pylint: disable=import-outside-toplevel
        if PLUGIN_DIR.encode() not in [h5pl.get(i) for i in range(h5pl.size())]:
            h5pl.append(PLUGIN_DIR.encode())
    return table
