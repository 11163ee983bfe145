"""Helpers of the scenarios that run the PyTorch training example
(examples/torch_gpt): argv of a job and readers of its outputs.

A job is `python3 -m torch_gpt.train` under mpirun (world = tp * dp); --log
gives one JSON line per step (loss also as float.hex), --save-ref writes the
global tensors (gathered, layout independent) and the resume objects.
"""
from __future__ import annotations

import hashlib
import json
import os

import torch

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))


def argv(mpirun: list, python: str, np: int, *args, port: int) -> list:
    return mpirun + ["-np", str(np), "-x", f"PYTHONPATH={EXAMPLES}", "-x", f"MASTER_PORT={port}",
                     "-x", "OMP_NUM_THREADS=1", python, "-m", "torch_gpt.train", *map(str, args)]


def losses(log_path: str) -> list:
    with open(log_path) as f:
        return [json.loads(line) for line in f if line.strip()]


def tensors(ref_path: str) -> dict:
    return torch.load(ref_path)["tensors"]


def fingerprint(ts: dict) -> str:
    """SHA-256 over every global tensor in key order, row-major bytes (layout independent)."""
    h = hashlib.sha256()
    for k in sorted(ts):
        t = ts[k].contiguous()
        h.update(k.encode())
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    return h.hexdigest()


def compare(a: dict, b: dict) -> dict:
    """Tensors that differ, the largest absolute element difference, and the largest
    difference relative to its tensor's largest magnitude (scale-aware)."""
    differing, max_abs, max_rel = 0, 0.0, 0.0
    for k in a:
        x, y = a[k].double(), b[k].double()
        if x.shape != y.shape or not torch.equal(a[k], b[k]):
            differing += 1
            d = (x - y).abs()
            max_abs = max(max_abs, float(d.max()))
            max_rel = max(max_rel, float(d.max()) / max(float(x.abs().max()), 1e-30))
    return {"tensors": len(a), "differing": differing, "max_abs": max_abs, "max_rel": max_rel}
