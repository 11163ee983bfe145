"""TieredCheckpointer: the local tier (node-local saves every K steps, replicated to R peer
nodes over the job's communicator, committed job-wide) and the global tier (a shared root every
M steps), one object (ckpt/protocol/local_tier.h; README "Two tiers").

Collective: every rank calls save() and resume() together with the same iteration.
Failure model: any `replicas` whole nodes may be lost (their local dirs gone); resume() then
restores from the survivors and their replicas. More lost, a layout change or no complete local
iteration: the global tier.

The global save is drained from the local copy, as the CLI's `ckpt train --local-dir` does: at a
global iteration the local save is taken first (it blocks, as every local save does), then a
background thread reads this rank's committed local copy (<node dir>/rank_<r>/iter_N, chunk hashes
checked) into buffers of its own and saves that to `root` (no second snapshot of training memory;
training goes on). The drain runs on the comm's async duplicate (the one ckpt.async_save uses: do
not run a ckpt.async_save on the same comm while a drain is in flight) and is joined (its error
raised) at the next global save, at resume() and at close(); the local saves in between keep its
iteration (pinned) on disk until it is joined.
"""
import json
import pickle
import threading

from . import _ckpt
from ._api import _entries, _json, load as _load
from ._comm import async_handle_of, handle_of
from ._descriptors import ShardedTensor, rebuild


class TieredCheckpointer:
    """root: the global (shared) root; local_dir: node-local dir ("{node}" -> node index when
    one host simulates nodes); local_every K, global_every M (0: never; saves at multiples);
    replicas R (< nodes); ranks_per_node: block placement (node = rank // ranks_per_node);
    layout: a JSON-able dict that must match at a local restore (e.g. {"tp": 2, "dp": 2});
    metadata: a JSON-able dict for the global checkpoints' manifests (as ckpt.save's)."""

    def __init__(self, root, local_dir, local_every, global_every, replicas=1, ranks_per_node=1, comm=None,
                 timeout=60.0, layout=None, metadata=None):
        self.root, self.local_dir = str(root), str(local_dir)
        self.local_every, self.global_every = int(local_every), int(global_every)
        self.replicas, self.ranks_per_node = int(replicas), int(ranks_per_node)
        self.comm, self.timeout = comm, float(timeout)
        self.layout = dict(layout or {})
        self.metadata = _json(metadata, "metadata")
        self._drain = None  # the global drain in flight: _Drain

    def _args(self, handle=None):
        return (self.local_dir, self.ranks_per_node, self.replicas, handle or handle_of(self.comm), self.timeout,
                json.dumps(self.layout))

    def due(self, iteration):
        """(local, global): which tiers save at this iteration."""
        glob = self.global_every > 0 and iteration % self.global_every == 0
        return (self.local_every > 0 and iteration % self.local_every == 0) or glob, glob

    def save(self, state, iteration):
        """Saves the tiers due at `iteration`; returns {"local": stats, "global": ...} (None if not due).
        Collective. The global save is started here and drained in the background: out["global"]
        is {"iteration", "mode": "background", "joined": stats of the previous drain or None};
        wait() returns the drain's save stats."""
        local, glob = self.due(iteration)
        out = {"local": None, "global": None}
        if glob:
            joined = self.wait()
        if local:
            tensors, objs, _, _ = _entries(state, for_load=False, op="save")
            pinned = self._drain.iteration if self._drain is not None else -1
            out["local"] = _ckpt.local_save(tensors, objs, int(iteration), *self._args(), pinned)
        if glob:
            # tensors and objs hold only the metadata the drain needs: it never reads their bytes.
            args = (tensors, objs, int(iteration), *self._args(async_handle_of(self.comm)), self.root, self.metadata)
            self._drain = _Drain(int(iteration), args)
            out["global"] = {"iteration": int(iteration), "mode": "background", "joined": joined}
        return out

    def wait(self):
        """Joins the global drain in flight (raising its error); returns its save stats (None if none)."""
        drain, self._drain = self._drain, None
        return drain.join() if drain is not None else None

    def close(self):
        """Joins the global drain in flight (raising its error). Collective."""
        self.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def resume(self, state):
        """Restores the newest iteration complete in some tier into `state`'s buffers.
        Returns (state, choice): choice has tier ("local", "global" or "none"), iteration, why;
        with "none" state is returned untouched. Joins a drain in flight first."""
        self.wait()
        choice = _ckpt.choose_tier(*self._args(), self.root)
        if choice["tier"] == "global":
            return _load(state, self.root, iteration=choice["iteration"], comm=self.comm, timeout=self.timeout), choice
        if choice["tier"] != "local":
            return state, choice
        tensors, objs, bufs, objects = _entries(state, for_load=True)
        st, blobs = _ckpt.local_restore(tensors, objs, int(choice["iteration"]), *self._args())
        for b in bufs:
            b.finish_load()
        choice["restore"] = st
        loaded = {id(o): pickle.loads(blob) for (_, o), blob in zip(objects, blobs)}
        return rebuild(state, lambda d: d.data if isinstance(d, ShardedTensor) else loaded[id(d)]), choice


class _Drain:
    """One global drain on a thread of its own (the C++ call releases the GIL)."""

    def __init__(self, iteration, args):
        self.iteration, self._stats, self._error = iteration, None, None
        self._thread = threading.Thread(target=self._run, args=(args,), name=f"ckpt-drain-{iteration}", daemon=True)
        self._thread.start()

    def _run(self, args):
        try:
            self._stats = _ckpt.local_drain(*args)
        except BaseException as e:  # noqa: BLE001 - raised at join
            self._error = e

    def join(self):
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._stats
