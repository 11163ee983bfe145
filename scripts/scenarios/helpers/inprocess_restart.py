#!/usr/bin/env python3
"""Two-tier checkpoints and an in-process restart of the PyTorch training
example (examples/torch_gpt), one process (world 1), ckpt's Python API.

  inprocess_restart.py --persist DIR --local DIR --out JSON [--model tiny] [--steps N]
                       [--persist-every P] [--local-every L] [--fail-at F]

1. reference: the uninterrupted run, N steps (loss of every step as float.hex).
2. two tiers: a local (non-persistent) save every L steps into --local (a
   node-local dir, e.g. /dev/shm: fast, lost with the node; only the newest
   kept, as MCore's local checkpoint manager does) and a persistent save every
   P steps into --persist. At step F an injected exception ends the step loop.
3. in-process restart: the same interpreter (torch, the ckpt module and the
   process stay up) rebuilds the job, loads the newest local checkpoint and
   trains to N; time-to-resume = rebuild + load; losses compared bitwise with 1.
4. the node dies: --local is gone; the restart finds no local checkpoint
   (ckpt's NotFoundError) and loads the persistent one: steps since it are lost.
5. negative control: local tier only (no persistent saves) and the node dies:
   nothing to load, the job starts from iteration 0.
Prints nothing but logs; writes the measurements to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

EXAMPLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples"))
sys.path.insert(0, EXAMPLES)

from torch_gpt import train as T  # noqa: E402
from torch_gpt.ckpt_io import Checkpointer  # noqa: E402
from torch_gpt.config import TrainConfig, preset  # noqa: E402
from torch_gpt.parallel import build_parallel_state  # noqa: E402


class InjectedFault(RuntimeError):
    pass


def new_job(model: str, steps: int):
    ps = build_parallel_state(1, 0, 1)
    return T.build_job(preset(model), TrainConfig(steps=steps), ps), ps


def keep_newest_only(root: str) -> None:
    """The local tier keeps only its newest iteration (non-persistent)."""
    iters = sorted(n for n in os.listdir(root) if n.startswith("iter_"))
    for n in iters[:-1]:
        shutil.rmtree(os.path.join(root, n))


def train(job, ck, to: int, a, fail_at=None, persist=True, local=True) -> list:
    losses = []
    while job.iteration < to:
        rec = T.train_step(job)
        losses.append((rec["iteration"], rec["loss_hex"]))
        if local and job.iteration % a.local_every == 0:
            ck.save(job, a.local, sync=True)
            keep_newest_only(a.local)
        if persist and job.iteration % a.persist_every == 0:
            ck.save(job, a.persist, sync=True)
        if fail_at is not None and job.iteration == fail_at:
            raise InjectedFault(f"injected fault after step {fail_at}")
    return losses


def restart(a, ck, roots: list) -> tuple:
    """Rebuilds the job in this process and loads the newest checkpoint of the
    first root that has one; (job, root used or None, seconds, roots that failed)."""
    t0 = time.perf_counter()
    job, _ = new_job(a.model, a.steps)
    failed = []
    for root in roots:
        try:
            ck.load(job, root)
            return job, root, time.perf_counter() - t0, failed
        except Exception as e:  # noqa: BLE001 - ckpt.NotFoundError and friends: try the next tier
            failed.append(f"{root}: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
    return job, None, time.perf_counter() - t0, failed


def main() -> None:
    ap = argparse.ArgumentParser()
    for k in ("--persist", "--local", "--out"):
        ap.add_argument(k, required=True)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--persist-every", type=int, default=5)
    ap.add_argument("--local-every", type=int, default=1)
    ap.add_argument("--fail-at", type=int, default=9)
    a = ap.parse_args()
    T.set_deterministic()
    ref_job, ps = new_job(a.model, a.steps)
    ck = Checkpointer(ps)
    ref = dict(train(ref_job, ck, a.steps, a, persist=False, local=False))
    os.makedirs(a.local, exist_ok=True)
    out = {"steps": a.steps, "fail_at": a.fail_at, "persist_every": a.persist_every, "local_every": a.local_every}

    job, _ = new_job(a.model, a.steps)
    t_fault = None
    try:
        train(job, ck, a.steps, a, fail_at=a.fail_at)
    except InjectedFault:
        t_fault = time.perf_counter()
    job = None
    # In-process restart from the local tier.
    job, used, secs, _ = restart(a, ck, [a.local, a.persist])
    out["inprocess_restored_from"] = "local" if used == a.local else ("persistent" if used else "none")
    out["inprocess_resumed_at"] = job.iteration
    out["inprocess_resume_s"] = round(secs, 4)
    out["inprocess_fault_to_resumed_s"] = round(time.perf_counter() - t_fault, 4)
    tail = train(job, ck, a.steps, a, persist=False, local=False)
    out["inprocess_steps_lost"] = a.fail_at - out["inprocess_resumed_at"]
    out["inprocess_bitwise_equal_steps"] = sum(ref[i] == h for i, h in tail)
    out["inprocess_compared_steps"] = len(tail)

    # The node dies: its local tier is gone.
    shutil.rmtree(a.local)
    job, used, secs, failed = restart(a, ck, [a.local, a.persist])
    out["node_loss_restored_from"] = "local" if used == a.local else ("persistent" if used else "none")
    out["node_loss_resumed_at"] = job.iteration
    out["node_loss_steps_lost"] = a.fail_at - job.iteration
    out["node_loss_local_error"] = failed[0] if failed else ""
    out["node_loss_resume_s"] = round(secs, 4)
    tail = train(job, ck, a.steps, a, persist=False, local=False)
    out["node_loss_bitwise_equal_steps"] = sum(ref[i] == h for i, h in tail)
    out["node_loss_compared_steps"] = len(tail)

    # Negative control: local tier only, then the node dies.
    nc_persist = a.persist + "-never-written"
    os.makedirs(a.local, exist_ok=True)
    job, _ = new_job(a.model, a.steps)
    try:
        train(job, ck, a.steps, a, fail_at=a.fail_at, persist=False)
    except InjectedFault:
        pass
    shutil.rmtree(a.local)
    job, used, secs, failed = restart(a, ck, [a.local, nc_persist])
    out["nc_restored_from"] = "none" if used is None else used
    out["nc_resumed_at"] = job.iteration
    out["nc_steps_lost"] = a.fail_at - job.iteration
    out["nc_errors"] = len(failed)
    ck.close()
    with open(a.out, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
