"""HDF5 plugin path for h5py: `import ckpt` makes zstd-compressed shards readable.

ckpt ships its HDF5 filter 32015 (zstd) as a plugin inside the package
(ckpt/hdf5-plugins/libckpt_h5zstd.so; a wheel, `make install` and the build
tree all carry it). HDF5 looks for plugins on a path table it fills once from
HDF5_PLUGIN_PATH (or its built-in default), so three places need the folder:
- the libhdf5 the extension links (Debian's h5py shares it): put first at run
  time (H5PLprepend, python/src/py_hdf5.cc);
- a libhdf5 not yet started (another copy, e.g. in a pip h5py wheel, or a
  child process such as h5dump): HDF5_PLUGIN_PATH set to the same table,
  unless it names the folder already;
- an h5py imported before ckpt with its own libhdf5: h5py.h5pl.prepend.
First, and folders that do not exist left out of HDF5_PLUGIN_PATH: HDF5 1.10
ends a plugin search with an error at a missing folder ("can't open
directory"), and Debian's default folder is missing unless a plugin package
created it.
"""
import os
import sys

from . import _ckpt

PLUGIN_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hdf5-plugins")


def add_plugin_path():
    """Puts PLUGIN_DIR first on every HDF5 plugin path in reach; returns the extension's table."""
    if not os.path.isdir(PLUGIN_DIR):
        return []  # a package without the plugin (a partial build): nothing to add
    table = _ckpt.hdf5_plugin_path_prepend(PLUGIN_DIR)
    env = os.environ.get("HDF5_PLUGIN_PATH")
    if env is None or PLUGIN_DIR not in env.split(os.pathsep):
        os.environ["HDF5_PLUGIN_PATH"] = os.pathsep.join(p for p in table if os.path.isdir(p))
    h5py = sys.modules.get("h5py")
    if h5py is not None:
        from h5py import h5pl  # pylint: disable=import-outside-toplevel
        if PLUGIN_DIR.encode() not in [h5pl.get(i) for i in range(h5pl.size())]:
            h5pl.prepend(PLUGIN_DIR.encode())
    return table
