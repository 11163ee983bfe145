"""Checkpointing from the training loop through ckpt's Python API.

Checkpointer is what train.py calls: load once before training (any saved
layout: ckpt reshards online), save every `interval` iterations (synchronous,
or asynchronous: the loop blocks only for ckpt's snapshot and the previous
save is waited for before the next one starts), and wait for a pending save at
the end. Every save/load appends one JSON line to `stats_log` (rank 0) with
the bytes this job moved, its wall time and MB/s; async saves also record the
blocking time as the loop sees it (descriptors built in Python + ckpt's
snapshot) and ckpt's own snapshot time, and the time one memcpy of the same
byte count takes on this rank, measured right before, for the blocking ratio.

The `ckpt` module is imported lazily (build/python after `make`, or
$CKPT_PYTHONPATH), so the job runs without it when no checkpoint is asked for.
Collective: every method that touches a checkpoint must be called by all ranks.
Errors from ckpt propagate (ckpt.CkptError with .code/.rank/.phase).
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch
import torch.distributed as dist

from . import ckpt_adapter
from .state import RNG_KEY, checkpoint_metadata

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def import_ckpt():
    """The ckpt package: $CKPT_PYTHONPATH, else <repo>/build/python, else sys.path."""
    for p in (os.path.join(REPO, "build", "python"), os.environ.get("CKPT_PYTHONPATH")):  # the last first
        if p and os.path.isdir(p) and p not in sys.path:
            sys.path.insert(0, p)
    try:
        import ckpt  # noqa: PLC0415
    except ImportError as e:
        raise ImportError(f"cannot import ckpt ({e}): build it first (`make`), or set "
                          "CKPT_PYTHONPATH to the folder holding the built package") from e
    return ckpt


def make_comm(ckpt, kind: str, world: int):
    """ckpt's control plane: None alone, TorchComm (default gloo group) or MpiComm."""
    if world == 1:
        return None
    if kind == "torch":
        return ckpt.TorchComm()
    if kind == "mpi":
        return ckpt.MpiComm()
    raise ValueError(f"unknown --ckpt-comm '{kind}' (torch | mpi)")


def _sum_over_ranks(x: float, ps) -> float:
    if ps.world_size == 1:
        return x
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t)
    return float(t)


def _max_over_ranks(x: float, ps) -> float:
    if ps.world_size == 1:
        return x
    t = torch.tensor([x], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t)


def _barrier(ps) -> None:
    if ps.world_size > 1:
        dist.barrier()


def memcpy_seconds(tensors: list[torch.Tensor], repeats: int = 5) -> float:
    """The baseline of the async blocking time: one memcpy (torch copy_) of as
    many bytes as `tensors` hold, between two preallocated host buffers; the
    fastest of `repeats` warm runs."""
    n = sum(t.numel() * t.element_size() for t in tensors)
    src, dst = torch.ones(n, dtype=torch.uint8), torch.empty(n, dtype=torch.uint8)
    dst.copy_(src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t0)
    return best


def state_tensors(ckpt, state, main_only: bool = False) -> list[torch.Tensor]:
    """The tensors a TorchState describes on this rank (main replicas: what it writes)."""
    flat = ckpt.torch_bridge.flat_state(state.sharded_state_dict())
    return [d.data for d in flat.values() if isinstance(d, ckpt.ShardedTensor)
            and (not main_only or all(r == 0 for r in d.replica_id))]


def saved_layout(ckpt, root: str, iteration=None) -> dict:
    """The "layout" metadata of a committed checkpoint ({} if it records none)."""
    info = ckpt.inspect(root) if iteration is None else ckpt.inspect(root, iteration=iteration)
    meta = info.get("metadata", {}) if isinstance(info, dict) else {}
    return meta.get("layout", {}) or info.get("layout", {}) or {}


class Checkpointer:
    def __init__(self, ps, *, save_dir=None, interval=0, async_save=False, comm="torch",
                 stats_log=None, compress=None, timeout=None):
        self.ps = ps
        self.timeout = timeout  # ckpt's collective deadline, seconds (None: its default)
        self.save_dir, self.interval, self.async_save = save_dir, interval, async_save
        self.compress = compress
        self.ckpt = import_ckpt()
        self.comm = make_comm(self.ckpt, comm, ps.world_size)
        self.stats_log = open(stats_log, "a") if stats_log and ps.rank == 0 else None
        self.pending = None  # (handle, record) of an async save in flight
        self.tiers = None  # a ckpt.TieredCheckpointer (enable_tiers)
        self.hold = None  # test hook (train.py --hold-before-save): (rank, seconds) that rank sleeps in each save

    def _log(self, rec: dict) -> None:
        if self.stats_log:
            self.stats_log.write(json.dumps(rec) + "\n")
            self.stats_log.flush()

    def load(self, job, root: str, iteration=None, use_rng="auto", use_iterator=True) -> dict:
        """Loads into `job` in place (online reshard when the layout differs)."""
        layout = saved_layout(self.ckpt, root, iteration)
        same_tp = int(layout.get("tp", job.ps.tp)) == job.ps.tp
        rng = same_tp if use_rng == "auto" else bool(use_rng)
        # use_iterator=False: the negative control, the sampler starts over
        state = ckpt_adapter.torch_state(job, self.ckpt, rng=rng, iterator=use_iterator)
        nbytes = sum(t.numel() * t.element_size() for t in state_tensors(self.ckpt, state))
        _barrier(self.ps)
        t0 = time.perf_counter()
        ckpt_adapter.load(job, self.ckpt, state, root, iteration, self.comm, partial=not (rng and use_iterator))
        _barrier(self.ps)
        secs = time.perf_counter() - t0
        total = _sum_over_ranks(nbytes, self.ps)
        rec = {"op": "load", "iteration": job.iteration, "root": root, "bytes": int(total),
               "seconds": secs, "mb_per_s": total / 1e6 / secs, "saved_layout": layout,
               "layout": job.ps.layout_json(), "rng_loaded": rng, "iterator_loaded": use_iterator}
        self._log(rec)
        return rec

    def reserve(self, job) -> int:
        """With async saves: allocates the snapshot arena for the job's state now
        (ckpt.reserve_async_save; at job start, not collective), so the first
        async save blocks for the copy only, not for mapping fresh memory.
        Returns the arena bytes (0 without async saves)."""
        if not self.async_save:
            return 0
        state = ckpt_adapter.torch_state(job, self.ckpt)
        return self.ckpt.reserve_async_save(self.ckpt.torch_bridge.flat_state(state.sharded_state_dict()),
                                            comm=self.comm)

    def maybe_save(self, job) -> None:
        if self.save_dir and self.interval > 0 and job.iteration % self.interval == 0:
            self.save(job)

    def save(self, job, root=None, sync=None) -> dict:
        """Saves the job's state at job.iteration under root (default save_dir)."""
        root = root or self.save_dir
        is_async = self.async_save if sync is None else not sync
        self.wait()  # saves are serialised: the previous one commits first
        state = ckpt_adapter.torch_state(job, self.ckpt)
        mine = state_tensors(self.ckpt, state, main_only=True)
        nbytes = sum(t.numel() * t.element_size() for t in mine)
        memcpy_s = None
        if is_async:  # the baseline: copy the bytes the snapshot copies into one buffer
            memcpy_s = memcpy_seconds(mine)
        _barrier(self.ps)
        t0 = time.perf_counter()
        if self.hold and self.hold[0] == self.ps.rank:  # the others are in ckpt's save, waiting for it
            print(f"rank {self.ps.rank}: holding {self.hold[1]} s before the save of iteration {job.iteration}",
                  file=sys.stderr, flush=True)
            time.sleep(self.hold[1])
        result = ckpt_adapter.save(job, self.ckpt, state, root, self.comm, is_async=is_async,
                                   compress=self.compress, timeout=self.timeout)
        blocking = time.perf_counter() - t0
        rec = {"op": "async_save" if is_async else "save", "iteration": job.iteration,
               "root": root, "bytes": int(_sum_over_ranks(nbytes, self.ps)),
               "layout": job.ps.layout_json()}
        if is_async:
            self.pending = (result, rec)  # first: the collectives below may fail (a lost node)
            start = getattr(result, "start_stats", None) or {}
            rec.update(blocking_s=_max_over_ranks(blocking, self.ps),
                       ckpt_blocking_s=_max_over_ranks(start.get("blocking_seconds", 0.0), self.ps),
                       snapshot_bytes=int(_sum_over_ranks(start.get("snapshot_bytes", 0), self.ps)),
                       memcpy_s=_max_over_ranks(memcpy_s, self.ps), t_start=t0)
            return rec
        _barrier(self.ps)
        secs = time.perf_counter() - t0
        rec.update(seconds=secs, mb_per_s=rec["bytes"] / 1e6 / secs,
                   ckpt_stats=_plain(result))
        self._log(rec)
        return rec

    def wait(self, timeout: float = 300.0) -> None:
        """Waits for the async save in flight (if any) to commit; logs it."""
        if self.pending is None:
            return
        handle, rec = self.pending
        self.pending = None
        handle.wait(timeout)
        _barrier(self.ps)
        secs = time.perf_counter() - rec.pop("t_start")
        rec.update(seconds=secs, mb_per_s=rec["bytes"] / 1e6 / secs,
                   blocking_ratio_vs_memcpy=rec["blocking_s"] / max(rec["memcpy_s"], 1e-9),
                   ckpt_blocking_ratio_vs_memcpy=rec["ckpt_blocking_s"] / max(rec["memcpy_s"], 1e-9),
                   ckpt_stats=_plain(getattr(handle, "stats", None)))
        self._log(rec)

    def enable_tiers(self, job, local_dir: str, local_every: int, global_every: int, replicas: int = 1,
                     ranks_per_node: int = 1) -> None:
        """Two tiers (ckpt.TieredCheckpointer): local saves every local_every iterations under
        local_dir ("{node}": the node index), replicated to `replicas` other nodes; the global
        tier (save_dir) every global_every, drained in the background from the local copy."""
        kwargs = {"timeout": self.timeout} if self.timeout is not None else {}
        self.tiers = self.ckpt.TieredCheckpointer(self.save_dir, local_dir, local_every, global_every,
                                                  replicas=replicas, ranks_per_node=ranks_per_node,
                                                  comm=self.comm, layout=job.ps.layout_json(),
                                                  metadata=checkpoint_metadata(job.model_cfg, job.ps), **kwargs)

    def tier_save(self, job):
        """The tiers due at job.iteration (None if none). Collective."""
        if not any(self.tiers.due(job.iteration)):
            return None
        state = ckpt_adapter.torch_state(job, self.ckpt)
        t0 = time.perf_counter()
        out = self.tiers.save(self.ckpt.torch_bridge.flat_state(state.sharded_state_dict()), job.iteration)
        rec = {"op": "tier_save", "iteration": job.iteration, "local": _plain(out["local"]),
               "global": _plain(out["global"]), "blocking_s": _max_over_ranks(time.perf_counter() - t0, self.ps)}
        self._log(rec)
        return rec

    def tier_resume(self, job) -> dict:
        """Restores the newest iteration complete in some tier (local, with the peers'
        replicas for a lost node's ranks, or global) into `job`; returns ckpt's choice
        (tier "none": nothing to resume, the job starts fresh). Collective."""
        from .train import restore_objects
        state = ckpt_adapter.torch_state(job, self.ckpt)
        state.prepare_load(None)
        request = self.ckpt.torch_bridge.flat_state(state.sharded_state_dict())
        t0 = time.perf_counter()
        loaded, choice = self.tiers.resume(request)
        if choice["tier"] != "none":
            state.apply({d.key: loaded[k] for k, d in request.items() if isinstance(d, self.ckpt.ShardedObject)})
            restore_objects(job, {k: v for k, v in state.extra.items() if k in ckpt_adapter.RESUME_KEYS})
        rec = {"op": "tier_resume", "iteration": job.iteration, "seconds": time.perf_counter() - t0,
               "choice": _plain(choice)}
        self._log(rec)
        return choice

    def report_pending(self) -> None:
        """After a training failure: joins the async save in flight (bounded by ckpt's deadline)
        and prints how it ended - a lost node's ranks and host (CkptTimeoutError) - which the
        training collective's error (gloo: "Connection reset by peer") does not say."""
        if self.pending is None:
            return
        handle, rec = self.pending
        self.pending = None
        try:
            handle.wait()
        except Exception as e:  # noqa: BLE001 - reported, the training error is raised after
            print(f"rank {self.ps.rank}: the async save of iteration {rec['iteration']} in flight failed: "
                  f"{type(e).__name__}: {e}", file=sys.stderr, flush=True)

    def close(self) -> None:
        self.wait()
        if self.tiers is not None:
            self._log({"op": "tier_drain_joined", "global": _plain(self.tiers.wait())})
        if self.stats_log:
            self.stats_log.close()


def _plain(x):
    """ckpt's stats as JSON-safe data (dicts of numbers/strings), else None."""
    try:
        return json.loads(json.dumps(x, default=str))
    except (TypeError, ValueError):
        return None


__all__ = ["Checkpointer", "import_ckpt", "make_comm", "RNG_KEY"]
