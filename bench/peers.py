#!/usr/bin/python3
"""Peer baselines on the very same arrays ckpt saved: torch.save/torch.load
and h5py, one process per rank running concurrently, like a training job.

  peers.py <raw ckpt iter dir> <scratch dir> <results.jsonl>

Each rank's arrays are read from its ckpt shard file (rank_<r>.h5) with h5py
first, so the bytes are identical. Saves are fsynced (torch.save alone is not
durable); loads run after dropping the page cache when allowed.
"""
import json, os, sys, time
from multiprocessing import Process, Queue

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


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def torch_save(tensors, path, q):
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(tensors, f)
        f.flush()
        os.fsync(f.fileno())
    q.put(time.perf_counter() - t0)


def torch_load(path, q):
    t0 = time.perf_counter()
    d = torch.load(path)
    _ = sum(t.numel() for t in d.values())
    q.put(time.perf_counter() - t0)


def h5py_save(tensors, path, q):
    t0 = time.perf_counter()
    with h5py.File(path, "w") as f:
        for k, t in tensors.items():
            a = t.view(torch.int16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
            f.create_dataset(k, data=a)
    fsync_path(path)
    q.put(time.perf_counter() - t0)


def parallel(target, args_per_rank):
    q = Queue()
    procs = [Process(target=target, args=(*a, q)) for a in args_per_rank]
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    per = [q.get() for _ in procs]
    return wall, max(per)


def main():
    src, scratch, results = sys.argv[1:4]
    os.makedirs(scratch, exist_ok=True)
    files = sorted(f for f in os.listdir(src) if f.startswith("rank_") and f.endswith(".h5"))
    per_rank = [arrays_of(os.path.join(src, f)) for f in files]
    nbytes = sum(t.numel() * t.element_size() for d in per_rank for t in d.values())
    rows = []
    pt = [os.path.join(scratch, f"torch_{i}.pt") for i in range(len(files))]
    wall, slowest = parallel(torch_save, [(per_rank[i], pt[i]) for i in range(len(files))])
    rows.append({"op": "torch.save", "ranks": len(files), "bytes": nbytes, "seconds": slowest})
    cold = drop_caches()
    wall, slowest = parallel(torch_load, [(p,) for p in pt])
    rows.append({"op": "torch.load", "ranks": len(files), "bytes": nbytes, "seconds": slowest, "cold": cold})
    hp = [os.path.join(scratch, f"h5py_{i}.h5") for i in range(len(files))]
    wall, slowest = parallel(h5py_save, [(per_rank[i], hp[i]) for i in range(len(files))])
    rows.append({"op": "h5py write", "ranks": len(files), "bytes": nbytes, "seconds": slowest})
    with open(results, "a") as f:
        for r in rows:
            r["mb_per_s"] = r["bytes"] / 1e6 / r["seconds"]
            f.write(json.dumps(r) + "\n")
            print(json.dumps(r))
    for p in pt + hp:
        os.remove(p)


if __name__ == "__main__":
    main()
