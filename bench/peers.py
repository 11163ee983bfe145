#!/usr/bin/python3
"""Peer baselines on the very same arrays ckpt saved, one op per call: one
process per rank, all started together after a barrier (like a job's ranks).

  peers.py torch.save <raw ckpt iter dir> <out dir>   -> <out dir>/torch_<r>.pt, fsynced
  peers.py h5py.save  <raw ckpt iter dir> <out dir>   -> <out dir>/h5py_<r>.h5, fsynced
  peers.py torch.load <dir of torch_<r>.pt>

Each rank's arrays are read from its ckpt shard file (rank_<r>.h5) with h5py
before the clock starts, so the bytes are identical. Saves are fsynced (the
same durability as ckpt's data files; torch.save alone is not durable). Prints
one JSON line: bytes (logical tensor bytes), seconds (slowest rank), stored
bytes. The cache state a load sees is the driver's business (bench/ops.py).
"""
import json
import os
import sys
import time
from multiprocessing import Barrier, Process, Queue

import h5py
import numpy as np
import torch


def attr_str(v):
    return v.decode() if isinstance(v, (bytes, np.bytes_)) else str(v)


def arrays_of(path):
    out = {}
    with h5py.File(path, "r") as f:
        for name, ds in f["tensors"].items():
            a = ds[()]
            if attr_str(ds.attrs["dtype"]) == "bf16":
                out[name] = torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
            else:
                out[name] = torch.from_numpy(np.ascontiguousarray(a))
    return out


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def torch_save(tensors, path):
    with open(path, "wb") as f:
        torch.save(tensors, f)
        f.flush()
        os.fsync(f.fileno())


def torch_load(path):
    d = torch.load(path)
    return sum(t.numel() * t.element_size() for t in d.values())


def h5py_save(tensors, path):
    with h5py.File(path, "w") as f:
        for k, t in tensors.items():
            a = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
            f.create_dataset(k, data=a)
    fsync_path(path)


def worker(fn, args, barrier, q):
    barrier.wait(timeout=600)
    t0 = time.perf_counter()
    r = fn(*args)
    q.put((time.perf_counter() - t0, r))


def parallel(fn, args_per_rank):
    """Runs fn once per rank in its own process; returns (slowest seconds, results)."""
    q, barrier = Queue(), Barrier(len(args_per_rank))
    procs = [Process(target=worker, args=(fn, a, barrier, q)) for a in args_per_rank]
    for p in procs:
        p.start()
    got = [q.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise SystemExit(f"peers: a rank process exited {p.exitcode}")
    return max(s for s, _ in got), [r for _, r in got]


def rank_files(d, prefix, suffix):
    return sorted(os.path.join(d, f) for f in os.listdir(d) if f.startswith(prefix) and f.endswith(suffix))


def main():
    op = sys.argv[1]
    if op == "torch.load":
        files = rank_files(sys.argv[2], "torch_", ".pt")
        secs, per = parallel(torch_load, [(p,) for p in files])
        nbytes = sum(per)
    else:
        src, out = sys.argv[2], sys.argv[3]
        os.makedirs(out, exist_ok=True)
        per_rank = [arrays_of(p) for p in rank_files(src, "rank_", ".h5")]
        nbytes = sum(t.numel() * t.element_size() for d in per_rank for t in d.values())
        fn, name = {"torch.save": (torch_save, "torch_{}.pt"), "h5py.save": (h5py_save, "h5py_{}.h5")}[op]
        files = [os.path.join(out, name.format(i)) for i in range(len(per_rank))]
        secs, _ = parallel(fn, list(zip(per_rank, files)))
    stored = sum(os.path.getsize(p) for p in files)
    print(json.dumps({"op": op, "ranks": len(files), "bytes": nbytes, "stored_bytes": stored, "seconds": secs,
                      "files": files}))


if __name__ == "__main__":
    main()
