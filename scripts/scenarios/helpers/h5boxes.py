"""Reads ckpt shard files (HDF5) back into global tensors, for scenario oracles.

A shard file holds datasets /tensors/<key>@<o0>_<o1>_... : one box of the
global tensor <key> at those element offsets. assemble() places every box of
every file it is given into one numpy array per key (global shape = the
largest extent seen), with the stored dtype (bf16 is stored as uint16).
"""
from __future__ import annotations

import glob

import h5py
import numpy as np


def boxes(paths, want=lambda key: True):
    """(key, offsets, array) of every box dataset; flat-range fragments (key@<off>:<a>-<b>) are skipped."""
    for p in paths:
        with h5py.File(p, "r") as f:
            for name, ds in f["tensors"].items():
                key, _, off = name.partition("@")
                if not want(key) or ":" in off:
                    continue
                offsets = tuple(int(x) for x in off.split("_")) if off else (0,) * ds.ndim
                yield key, offsets, np.asarray(ds[()])


def assemble(pattern: str, want=lambda key: True) -> dict:
    parts: dict = {}
    for key, off, arr in boxes(sorted(glob.glob(pattern)), want):
        parts.setdefault(key, []).append((off, arr))
    out = {}
    for key, ps in parts.items():
        shape = tuple(max(o[i] + a.shape[i] for o, a in ps) for i in range(ps[0][1].ndim))
        g = np.zeros(shape, dtype=ps[0][1].dtype)
        for o, a in ps:
            g[tuple(slice(o[i], o[i] + a.shape[i]) for i in range(a.ndim))] = a
        out[key] = g
    return out
