"""Resume and retention: list_iterations, latest, CheckpointManager.

Thin over the C++ library: ListIterations / LatestIteration (what a load of
"the latest" picks), ApplyRetention (keep the newest K and every M-th, the
deletion crash-safe: ckpt/protocol/retention.h) and the load's fallback (the
newest iteration that loads with every hash verified, all ranks agreeing).
"""
import signal
import threading

from . import _ckpt
from ._errors import NotFoundError


def list_iterations(root):
    """Committed iterations under root, ascending ([] if none or no root)."""
    try:
        return list(_ckpt.list_iterations(str(root)))
    except NotFoundError:
        return []


def latest(root):
    """The iteration a load of "the latest" picks (None if none is committed)."""
    try:
        return int(_ckpt.latest(str(root)))
    except NotFoundError:
        return None


def apply_retention(root, newest, keep_last=0, keep_every=0):
    """Deletes the committed iterations older than `newest` that are neither among
    the newest keep_last nor multiples of keep_every (one process, after
    `newest` committed). Returns {"deleted": [...], "kept": [...]}."""
    return _ckpt.apply_retention(str(root), int(newest), int(keep_last), int(keep_every))


class CheckpointManager:
    """Saves a TorchState every `save_every` steps under root, keeps the newest
    keep_last and every keep_every-th iteration (0: no such rule; both 0: keep
    all), resumes from the newest iteration that loads and verifies, and on a
    preemption signal saves at the next save() call and exits.

        mgr = ckpt.CheckpointManager(root, state, comm=comm, save_every=100, keep_last=3)
        start = mgr.restore() or 0          # None: nothing to resume from
        for step in range(start + 1, steps + 1):
            train_step()
            mgr.save(step)                  # saves when due (or preempted)
        mgr.close()

    async_save=True: save() returns once the state is snapshotted; retention of
    an iteration runs when its save is joined (the next save, wait(), close()).
    Preemption (signals, default SIGTERM; installed in the main thread only):
    the flag is agreed over torch.distributed's default group when that is
    initialised (one all-reduce per save() call), so every rank saves the same
    step; then the save is joined and, with exit_on_preemption, SystemExit(0)
    is raised. save_kwargs / load_kwargs go to ckpt.save and ckpt.load.
    Collective: every rank calls restore, save, wait and close in step."""

    def __init__(self, root, state, comm=None, save_every=1, keep_last=0, keep_every=0, async_save=False,
                 preemption_signals=(signal.SIGTERM,), exit_on_preemption=True, save_kwargs=None,
                 load_kwargs=None):
        if save_every < 1 or keep_last < 0 or keep_every < 0:
            raise ValueError(f"ckpt: save_every={save_every} (>= 1), keep_last={keep_last} and "
                             f"keep_every={keep_every} (>= 0)")
        self.root, self.state, self.comm = str(root), state, comm
        self.save_every, self.keep_last, self.keep_every = int(save_every), int(keep_last), int(keep_every)
        self.async_save, self.exit_on_preemption = bool(async_save), bool(exit_on_preemption)
        self.save_kwargs, self.load_kwargs = dict(save_kwargs or {}), dict(load_kwargs or {})
        self.rank = 0 if comm is None else int(comm.rank)
        self._pending = None  # (handle, iteration) of an async save in flight
        self._signalled = False
        self.restored = None  # the iteration restore() loaded
        self._last = None  # the newest iteration saved or restored (never saved twice)
        if preemption_signals and threading.current_thread() is threading.main_thread():
            for sig in preemption_signals:
                signal.signal(sig, self._on_signal)

    def _on_signal(self, signum, frame):  # noqa: ARG002 - signal handler signature
        self._signalled = True

    def all_iterations(self):
        return list_iterations(self.root)

    def latest(self):
        return latest(self.root)

    def restore(self, iteration=None):
        """Loads the newest iteration that loads with its hashes verified (falling
        back past damaged ones; None: none committed) or `iteration`; returns the
        iteration loaded, or None."""
        from .torch_bridge import load_state
        if iteration is None and latest(self.root) is None:
            return None
        kw = {"fallback": iteration is None, **self.load_kwargs}
        self.restored = self._last = load_state(self.state, self.root, iteration, comm=self.comm, **kw)
        if self.restored < (latest(self.root) or -1):  # newer ones are damaged: saves go on from here
            self.save_kwargs.setdefault("allow_older", True)
        return self.restored

    @property
    def preempted(self):
        return self._signalled

    def _agree_preempted(self):
        """True on every rank when any rank got a preemption signal."""
        flag = self._signalled
        try:
            import torch
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                t = torch.tensor([1 if flag else 0], dtype=torch.int32)
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                flag = bool(t.item())
        except ImportError:
            pass
        return flag

    def should_save(self, step):
        return step % self.save_every == 0

    def save(self, step, force=False):
        """Saves iteration `step` when due (step % save_every == 0), forced, or
        preempted, unless it saved or restored `step` already; returns True if
        it saved. On preemption it joins the save and raises SystemExit(0)
        (exit_on_preemption) once it committed."""
        preempted = self._agree_preempted()
        if step == self._last or not (force or preempted or self.should_save(step)):
            if preempted:  # this step is saved already
                self._exit()
            return False
        self._last = step
        from .torch_bridge import async_save_state, save_state
        self.wait()
        if self.async_save and not preempted:
            self._pending = (async_save_state(self.state, self.root, step, comm=self.comm, **self.save_kwargs), step)
        else:
            save_state(self.state, self.root, step, comm=self.comm, **self.save_kwargs)
            self._retain(step)
        if preempted:
            self._exit()
        return True

    def _exit(self):
        self.wait()
        if self.exit_on_preemption:
            raise SystemExit(0)

    def _retain(self, iteration):
        if self.rank == 0 and (self.keep_last or self.keep_every):
            apply_retention(self.root, iteration, self.keep_last, self.keep_every)

    def wait(self, timeout=None):
        """Joins the async save in flight (raising its error), then applies retention."""
        if self._pending is not None:
            handle, iteration = self._pending
            self._pending = None
            handle.wait(timeout)
            self._retain(iteration)

    def close(self):
        self.wait()
