"""TieredCheckpointer: the local tier (node-local saves every K steps, replicated to R peer
nodes over the job's communicator, committed job-wide) and the global tier (a shared root every
M steps), one object (ckpt/protocol/local_tier.h; README "Two tiers").

Collective: every rank calls save() and resume() together with the same iteration.
Failure model: any `replicas` whole nodes may be lost (their local dirs gone); resume() then
restores from the survivors and their replicas. More lost, a layout change or no complete local
iteration: the global tier.

What blocks: save() only joins the previous save (if still running) and copies the state into
host memory (one arena reused across saves, one memcpy of the state's bytes: the C++
AsyncLocalSaver of ckpt/protocol/local_async.h); training may overwrite its tensors as soon as
save() returns. In the background, on the comm's async duplicate (the one ckpt.async_save uses:
do not run a ckpt.async_save on the same comm while a save is in flight): the local write, the
replication to the peers, the local commit and, at a global iteration, the global save drained
from this rank's committed local copy (<node dir>/rank_<r>/iter_N, chunk hashes checked, read
back into the same host arena: no second snapshot of training memory). At most one save is in
flight; it is joined at the next save(), resume(), wait() and close(), and its failure is raised
there (ckpt.CkptError with .rank and .phase; nothing of it is marked or committed, the previous
iterations stay usable).
"""
import json
import pickle

from . import _ckpt
from ._api import _JOIN_AT_EXIT, _entries, _json, load as _load
from ._comm import async_handle_of, ends_after_launcher_term, handle_of
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
        self._saver = None  # _ckpt.LocalSaver on the comm's async duplicate (made at the first save)

    def _args(self):
        return (self.local_dir, self.ranks_per_node, self.replicas, handle_of(self.comm), self.timeout,
                json.dumps(self.layout))

    def due(self, iteration):
        """(local, global): which tiers save at this iteration."""
        glob = self.global_every > 0 and iteration % self.global_every == 0
        return (self.local_every > 0 and iteration % self.local_every == 0) or glob, glob

    def _local_saver(self):
        if self._saver is None:
            self._saver = _ckpt.LocalSaver(async_handle_of(self.comm))
            _JOIN_AT_EXIT.add(self)  # a save in flight is joined before MPI is finalised
        return self._saver

    def reserve(self, state):
        """Allocates (and faults in) the host snapshot memory for a state shaped like `state` now, so
        that the first save blocks for the copy only (else it maps fresh memory: allocate_seconds).
        Joins a save in flight first (raising its error). Returns the capacity in bytes; the memory
        is reused by later saves and grows when a state needs more. Not collective."""
        tensors, _, bufs, _ = _entries(state, for_load=False, op="reserve")
        capacity = self._local_saver().reserve(tensors)
        del bufs
        return capacity

    def save(self, state, iteration):
        """Starts the tiers due at `iteration`: returns {"local": ..., "global": ..., "joined": ...}
        (None where not due). Blocks only to join the previous save and to snapshot the state;
        out["local"] is {"iteration", "mode": "background", "blocking_seconds" (= wait_previous_seconds
        + snapshot_seconds), "snapshot_bytes", "allocate_seconds" (growing the host arena, first save)};
        out["global"] is {"iteration", "mode": "background"} at a global iteration; out["joined"] is
        the previous save's result (as wait()'s) when this call joined it. Collective."""
        local, glob = self.due(iteration)
        out = {"local": None, "global": None, "joined": None}
        if not local:
            return out
        tensors, objs, bufs, _ = _entries(state, for_load=False, op="save")
        with ends_after_launcher_term(f"tiered save of iteration {iteration} (joins the previous one)"):
            st = self._local_saver().start(tensors, objs, int(iteration), self.local_dir, self.ranks_per_node,
                                           self.replicas, self.timeout, json.dumps(self.layout),
                                           self.root if glob else "", self.metadata)
        del bufs  # the live tensors are copied: training may change them now
        out["joined"] = st.pop("joined")
        out["local"] = st
        if glob:
            out["global"] = {"iteration": int(iteration), "mode": "background"}
        return out

    def wait(self):
        """Joins the save in flight (raising its error). Returns its result, None if none was in flight:
        {"iteration", "local": local save stats (bytes written, sent and received over the network,
        buffer bytes, write/replicate/commit seconds), "global": the drained global save's stats (with
        "drained_from") or None, "background_seconds"}."""
        if self._saver is None:
            return None
        with ends_after_launcher_term("tiered save in flight"):
            return self._saver.wait()

    def close(self):
        """Joins the save in flight (raising its error). Collective."""
        self.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def resume(self, state):
        """Restores the newest iteration complete in some tier into `state`'s buffers.
        Returns (state, choice): choice has tier ("local", "global" or "none"), iteration, why;
        with "none" state is returned untouched. Joins a save in flight first."""
        self.wait()
        choice = _ckpt.choose_tier(*self._args(), self.root)
        if choice["tier"] == "global":
            return _load(state, self.root, iteration=choice["iteration"], comm=self.comm, timeout=self.timeout), choice
        if choice["tier"] != "local":
            return state, choice
        tensors, objs, bufs, objects = _entries(state, for_load=True)
        with ends_after_launcher_term(f"restore of local iteration {choice['iteration']}"):
            st, blobs = _ckpt.local_restore(tensors, objs, int(choice["iteration"]), *self._args())
        for b in bufs:
            b.finish_load()
        choice["restore"] = st
        loaded = {id(o): pickle.loads(blob) for (_, o), blob in zip(objects, blobs)}
        return rebuild(state, lambda d: d.data if isinstance(d, ShardedTensor) else loaded[id(d)]), choice

