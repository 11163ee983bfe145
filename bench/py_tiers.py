#!/usr/bin/env python3
"""Training blocked per local save of ckpt.TieredCheckpointer vs one memcpy of the same bytes
(issue 33 item 5, the Python side; bench/tiers.py has the CLI's figures).

A training loop on a GPT-like state (--mb MB of fp32 tensors, 2 per layer plus embeddings):
every step changes every tensor (as an optimizer step does) and then "computes" for --step-s
seconds; a local save every step (node dir in tmpfs, /dev/shm), a global save every --global-every
(drained from the local copy, root under /tmp). Per save: the time save() blocks the loop (Python
wall time, descriptors included), of which ckpt's snapshot copy and the wait for the previous
save's background job (0 when --step-s outlasts the background work, as the default does here).
Baseline, right before each save (same machine load): ckpt_lab.memcpy_seconds,
the median of 3 memcpys of the same tensors into one warm buffer (MedianStateMemcpySeconds, what
the C++ async bench uses); the ratio is per save, its median and range over the steady saves.

  PYTHONPATH=build/python /usr/bin/python3 bench/py_tiers.py [--mb 96] [--steps 8]
  mpirun -np 2 ... bench/py_tiers.py   # ckpt.MpiComm, 2 simulated nodes, 1 replica
Prints one JSON line per rank; the first save is reported apart (with --no-reserve it maps its
memory: allocation and first touch).
"""
import argparse
import json
import os
import shutil
import statistics
import time

import torch

import ckpt
import ckpt_lab  # the harness's benchmark module (harness/lab/py_lab.cc), build tree only
from ckpt import _api

ap = argparse.ArgumentParser()
ap.add_argument("--mb", type=float, default=96.0, help="state bytes per rank (MB)")
ap.add_argument("--layers", type=int, default=12)
ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--global-every", type=int, default=4)
ap.add_argument("--no-reserve", dest="reserve", action="store_false",
                help="no TieredCheckpointer.reserve before the loop: the first save maps its memory")
ap.add_argument("--step-s", type=float, default=2.0, help="compute per step after the state update")
a = ap.parse_args()

mpi = "OMPI_COMM_WORLD_SIZE" in os.environ
comm = ckpt.MpiComm() if mpi else None
rank, world = (comm.rank, comm.size) if mpi else (0, 1)
n = int(a.mb * 1e6 / 4 / (2 * a.layers + 2))
tensors = {f"layer{i}.{w}": torch.randn(n) for i in range(a.layers) for w in ("qkv", "fc")}
tensors.update({"embed": torch.randn(n), "head": torch.randn(n)})
sd = {k: ckpt.ShardedTensor.from_rank_offsets(k, t, (0, rank, world)) for k, t in tensors.items()}
sd["args"] = ckpt.ShardedObject("args", {"layers": a.layers}, (world,), (rank,))
nbytes = sum(t.numel() * t.element_size() for t in tensors.values())

# One host: the ranks are children of one launcher, so its pid names the dirs they share.
work, shm = (f"{base}/py_tiers_{os.getppid() if mpi else os.getpid()}" for base in ("/tmp", "/dev/shm"))
tc = ckpt.TieredCheckpointer(f"{work}/global", f"{shm}/node{{node}}", local_every=1, global_every=a.global_every,
                             replicas=1 if world > 1 else 0, ranks_per_node=1, comm=comm)
reserve_t0 = time.perf_counter()
reserved = tc.reserve(sd) if a.reserve else 0  # the snapshot memory before the loop (as train.py does)
reserve_s = time.perf_counter() - reserve_t0
entries = _api._entries(sd, for_load=False)[0]
saves, joined = [], []
for step in range(1, a.steps + 1):
    for t in tensors.values():
        t.add_(1.0)  # the optimizer step: every byte changes
    memcpy = ckpt_lab.memcpy_seconds(entries, 3)  # right before: the same machine load as the save
    t0 = time.perf_counter()
    out = tc.save(sd, step)
    blocked = time.perf_counter() - t0
    keys = ("snapshot_seconds", "wait_previous_seconds", "allocate_seconds")
    saves.append({"blocked": blocked, "memcpy": memcpy, **{k: out["local"][k] for k in keys}})
    if out["joined"]:
        joined.append(out["joined"])
    time.sleep(a.step_s)  # the forward/backward of the next step
joined.append(tc.wait())
steady = saves[1:]
med = {k: statistics.median(s[k] for s in steady) for k in ("blocked", "snapshot_seconds", "wait_previous_seconds",
                                                            "memcpy")}
ratios = [s["blocked"] / s["memcpy"] for s in steady]
row = {"bench": "py_tiers_local_save", "rank": rank, "world": world, "state_bytes": nbytes, "steps": a.steps,
       "step_s": a.step_s, "memcpy_same_bytes_median_s": med["memcpy"],
       "reserved_bytes": reserved, "reserve_s": reserve_s, "first": saves[0],
       "steady_blocked_median_s": med["blocked"], "steady_snapshot_median_s": med["snapshot_seconds"],
       "steady_wait_previous_median_s": med["wait_previous_seconds"],
       "ratio_blocked_vs_memcpy_median": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)],
       "ratio_snapshot_vs_memcpy_median": statistics.median(s["snapshot_seconds"] / s["memcpy"] for s in steady),
       "blocked_all_s": [round(s["blocked"], 5) for s in saves],
       "background_median_s": statistics.median(j["background_seconds"] for j in joined),
       "drained": [j["iteration"] for j in joined if j["global"]]}
print(json.dumps(row), flush=True)
if rank == 0:
    time.sleep(1.0 if world > 1 else 0)  # the other ranks leave their last collective
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(shm, ignore_errors=True)
