"""TieredCheckpointer: the local tier (node-local saves every K steps, replicated to R peer
nodes over the job's communicator, committed job-wide) and the global tier (a shared root every
M steps), one object (ckpt/protocol/local_tier.h; README "Two tiers").

Collective: every rank calls save() and resume() together with the same iteration.
Failure model: any `replicas` whole nodes may be lost (their local dirs gone); resume() then
restores from the survivors and their replicas. More lost, a layout change or no complete local
iteration: the global tier. In Python the global save is ckpt.save of the live state (the CLI's
`ckpt train --local-dir` drains it from the local copy in the background instead).
"""
import json
import pickle

from . import _ckpt
from ._api import _entries, load as _load, save as _save
from ._comm import handle_of
from ._descriptors import ShardedTensor, rebuild


class TieredCheckpointer:
    """root: the global (shared) root; local_dir: node-local dir ("{node}" -> node index when
    one host simulates nodes); local_every K, global_every M (0: never; saves at multiples);
    replicas R (< nodes); ranks_per_node: block placement (node = rank // ranks_per_node);
    layout: a JSON-able dict that must match at a local restore (e.g. {"tp": 2, "dp": 2})."""

    def __init__(self, root, local_dir, local_every, global_every, replicas=1, ranks_per_node=1, comm=None,
                 timeout=60.0, layout=None):
        self.root, self.local_dir = str(root), str(local_dir)
        self.local_every, self.global_every = int(local_every), int(global_every)
        self.replicas, self.ranks_per_node = int(replicas), int(ranks_per_node)
        self.comm, self.timeout = comm, float(timeout)
        self.layout = dict(layout or {})

    def _args(self):
        return (self.local_dir, self.ranks_per_node, self.replicas, handle_of(self.comm), self.timeout,
                json.dumps(self.layout))

    def due(self, iteration):
        """(local, global): which tiers save at this iteration."""
        glob = self.global_every > 0 and iteration % self.global_every == 0
        return (self.local_every > 0 and iteration % self.local_every == 0) or glob, glob

    def save(self, state, iteration):
        """Saves the tiers due at `iteration`; returns {"local": stats, "global": stats} (None if not due)."""
        local, glob = self.due(iteration)
        out = {"local": None, "global": None}
        if local:
            tensors, objs, _, _ = _entries(state, for_load=False, op="save")
            out["local"] = _ckpt.local_save(tensors, objs, int(iteration), *self._args())
        if glob:
            out["global"] = _save(state, self.root, iteration, comm=self.comm, timeout=self.timeout,
                                  layout=self.layout, allow_older=True)
        return out

    def resume(self, state):
        """Restores the newest iteration complete in some tier into `state`'s buffers.
        Returns (state, choice): choice has tier ("local", "global" or "none"), iteration, why;
        with "none" state is returned untouched."""
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
