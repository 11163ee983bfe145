#!/usr/bin/python3
"""Reads ckpt shard files with h5py and checks them against expectations.

Usage: /usr/bin/python3 h5py_read.py EXPECT.json
Run with Debian's python3 (python3-h5py, python3-numpy) and HDF5_PLUGIN_PATH
pointing at the build's h5plugin/ directory so filter 32015 (zstd) loads.

EXPECT.json: {"files": [{"path", "rank", "compressed", "datasets": [
  {"name", "numpy_dtype", "shape", "bits", "values", "attrs": {name: value}}]}]}
"bits" are the elements' raw bit patterns (unsigned ints of the element
size); "values" the numbers h5py must produce (null to skip). Exit 0 if all
match; otherwise prints every mismatch and exits 1.
"""
import json
import sys

import h5py
import numpy as np

ZSTD_FILTER = 32015
SHUFFLE_FILTER = 2
UINT_OF_SIZE = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def as_text(v):
    return v.decode("ascii") if isinstance(v, bytes) else v


def check_attrs(where, obj, expected, errors):
    for name, want in expected.items():
        if name not in obj.attrs:
            errors.append(f"{where}: attribute {name!r} missing")
            continue
        got = obj.attrs[name]
        if isinstance(want, str):
            ok = as_text(got) == want
        else:
            ok = np.array_equal(np.asarray(got).reshape(-1), np.asarray(want).reshape(-1))
        if not ok:
            errors.append(f"{where}: attribute {name!r} is {got!r}, expected {want!r}")


def filter_ids(ds):
    plist = ds.id.get_create_plist()
    return [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]


def check_dataset(path, f, spec, compressed, errors):
    where = f"{path}:{spec['name']}"
    if spec["name"] not in f:
        errors.append(f"{where}: dataset missing")
        return
    ds = f[spec["name"]]
    if ds.dtype != np.dtype(spec["numpy_dtype"]):
        errors.append(f"{where}: dtype {ds.dtype}, expected {spec['numpy_dtype']}")
        return
    if list(ds.shape) != spec["shape"]:
        errors.append(f"{where}: shape {ds.shape}, expected {spec['shape']}")
        return
    want_filters = [SHUFFLE_FILTER, ZSTD_FILTER] if compressed else []
    if ds.chunks is not None and filter_ids(ds) != want_filters:
        errors.append(f"{where}: filters {filter_ids(ds)}, expected {want_filters}")
    data = ds[()]  # decodes every chunk through HDF5's pipeline
    bits = np.ascontiguousarray(data).view(UINT_OF_SIZE[data.dtype.itemsize]).reshape(-1)
    if not np.array_equal(bits, np.asarray(spec["bits"], dtype=np.uint64).astype(bits.dtype)):
        errors.append(f"{where}: element bits differ: got {bits[:8].tolist()}..., "
                      f"expected {spec['bits'][:8]}...")
    if spec.get("values") is not None:
        got = data.astype(np.float64).reshape(-1)
        if not np.array_equal(got, np.asarray(spec["values"], dtype=np.float64)):
            errors.append(f"{where}: values differ: got {got[:8].tolist()}..., "
                          f"expected {spec['values'][:8]}...")
    check_attrs(where, ds, spec.get("attrs", {}), errors)


def main():
    with open(sys.argv[1]) as fp:
        expect = json.load(fp)
    errors = []
    checked = 0
    for fspec in expect["files"]:
        path = fspec["path"]
        with h5py.File(path, "r") as f:
            check_attrs(path, f, {"format": "ckpt-shard", "format_version": 1,
                                  "rank": fspec["rank"]}, errors)
            for spec in fspec["datasets"]:
                check_dataset(path, f, spec, fspec["compressed"], errors)
                checked += 1
    for e in errors:
        print("MISMATCH", e)
    print(f"h5py {h5py.__version__} (HDF5 {h5py.version.hdf5_version}): "
          f"checked {checked} datasets, {len(errors)} mismatches")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
