"""ckpt.save / ckpt.load / ckpt.async_save over a sharded state dict."""
import json
import pickle
import time
import warnings

from . import _ckpt
from ._comm import async_handle_of, ends_after_launcher_term, handle_of
from ._descriptors import ShardedObject, ShardedTensor, flatten, rebuild
from ._errors import CkptTimeoutError
from ._tensors import HostBuffer

# Megatron-Core StrictHandling names -> (C++ strict mode, warn about, return what).
_STRICT = {
    "assume_ok_unexpected": ("missing", None, None),
    "log_unexpected": ("missing", "unexpected", None),
    "log_all": ("none", "all", None),
    "raise_unexpected": ("all", None, None),
    "raise_all": ("all", None, None),
    "return_unexpected": ("missing", None, "unexpected"),
    "return_all": ("none", None, "all"),
    "ignore_all": ("none", None, None),
    # ckpt's own names (as `ckpt load --strict`): raise on ...
    "none": ("none", None, None),
    "unexpected": ("unexpected", None, None),
    "missing": ("missing", None, None),
    "all": ("all", None, None),
}


def _entries(state, for_load, op="load"):
    tensors, objects = flatten(state, strict_leaves=None if for_load else op)
    bufs = [HostBuffer(t.data, for_load) for _, t in tensors]
    entries = [(t.key, t.dtype, t.global_shape, t.global_offset, t.local_shape, t.replica_id, t.flat_range,
                t.allow_shape_mismatch, b.address, b.nbytes) for (_, t), b in zip(tensors, bufs)]
    objs = [o._entry(with_data=not for_load) for _, o in objects]
    return entries, objs, bufs, objects


def _json(value, what):
    try:
        return json.dumps(value if value is not None else {})
    except TypeError as e:
        raise TypeError(f"ckpt: {what} must be JSON-serialisable: {e}") from None


def save(sharded_state_dict, root, iteration, comm=None, compress=None, timeout=60.0, metadata=None,
         layout=None, chunk_bytes=0, allow_older=False, chunk_hash=None, direct_io=None, progress=None):
    """Saves every rank's shards as checkpoint `iteration` under `root` (collective
    over comm): atomic, nothing visible unless every rank wrote its part. Only main
    replicas (replica_id all zeros) are written; replicated shards are spread over
    their holders. metadata: a JSON-serialisable dict recorded in the manifest (e.g.
    {"model": {"family": "megatron_gpt", "config": <model config>}} for `ckpt
    plan/reshard`). A save below the newest
    iteration under root (a restart in a used root) raises FailedPreconditionError
    unless allow_older=True. chunk_hash: the integrity hash of the stored chunks,
    recorded in the manifest: "sha256" (None: the default; tamper-evident) or
    "xxh3-128" (much faster to verify on load; detects damage, not forgery).
    direct_io: True writes the shard files with O_DIRECT (chunks of >= 64 KiB
    aligned to 4 KiB; buffered where the filesystem refuses), False through the
    page cache (chunks packed); None: CKPT_DIRECT_IO decides (on unless "0").
    timeout: seconds a silent rank is waited for (a rank that keeps writing is
    never cut off); 0.001 .. 604800 (7 days), else InvalidArgumentError (inf
    too: every wait has a deadline). OutcomeUnknownError: the iteration is
    visible but its commit point (the root fsync) was not confirmed.
    progress: a callable given a dict (op, phase, bytes_done, bytes_total,
    files_done, files_total, elapsed, rate, eta, final) at most every 0.5 s
    and once at the end, from a reporter thread (the GIL taken; an exception it raises is
    printed and stops the calls, never the save).
    Returns this rank's stats (the library's one stats JSON, the keys `ckpt save
    --json` sums): bytes_written, phase_seconds, direct_io, direct_write_bytes,
    buffered_write_bytes, direct_io_fallback, warning, ... ("direct_bytes" is
    kept as an alias of direct_write_bytes for one release)."""
    entries, objs, bufs, _ = _entries(sharded_state_dict, for_load=False, op="save")
    with ends_after_launcher_term(f"save of iteration {iteration}"):
        return _ckpt.save(entries, objs, str(root), int(iteration), handle_of(comm), compress or "none",
                          float(timeout), _json(metadata, "metadata"), _json(layout, "layout"), int(chunk_bytes),
                          bool(allow_older), chunk_hash or "sha256", _direct_write_code(direct_io), progress)


def _direct_write_code(direct_io):  # -1: CKPT_DIRECT_IO decides; 0 buffered; 1 direct
    return -1 if direct_io is None else int(bool(direct_io))


def _direct_read_code(direct_io):
    if direct_io is None:
        return -1
    if isinstance(direct_io, str):
        if direct_io != "auto":
            raise ValueError(f"ckpt: direct_io={direct_io!r} is not True, False, None or 'auto'")
        return 2
    return int(bool(direct_io))


def load(sharded_state_dict, root, iteration=None, comm=None, strict="raise_all", timeout=60.0,
         verify_hashes=True, fallback=False, stats=None, direct_io=None, progress=None):
    """Loads checkpoint `iteration` (None: the latest) into every ShardedTensor in
    place, under any layout (reshard on load), and returns the state dict with each
    ShardedTensor replaced by its tensor and each ShardedObject by its loaded
    object. Collective over comm. strict: Megatron-Core's StrictHandling names
    ("raise_all" (default: a request that differs from the checkpoint in keys,
    missing or unexpected, raises naming them - NotFoundError for keys missing
    from the checkpoint, FailedPreconditionError for checkpoint keys not asked
    for - so that a resume which forgot the optimizer, RNG or progress never
    passes silently),
    "assume_ok_unexpected", "raise_unexpected", "return_unexpected" -> (state,
    unexpected), "return_all" -> (state, missing, unexpected), "log_*",
    "ignore_all") or ckpt's "none|unexpected|missing|all" (raise on ...): opting
    out is by name. Missing keys that do not raise are skipped (left as they are).
    stats: a dict to fill with the load's stats: "iteration" (the one loaded),
    "missing_keys" (skipped), "unexpected_keys" (in the checkpoint, not asked
    for), "skipped" (iterations passed over, each with why). fallback=True: when
    the iteration asked for (or the latest) fails to load, the newest older one
    that loads is loaded instead; a fallback warns (ckpt.FallbackWarning) naming
    the iteration asked for, the one loaded and why. direct_io: True reads the shard
    files with O_DIRECT, bypassing the page cache (faster for files not cached,
    e.g. a restarted job; slower for files still cached); False reads them
    through the page cache; "auto" decides per file (direct unless at least half
    of it is cached); None: CKPT_DIRECT_IO decides ("auto" when unset, "0" off,
    else on). stats["direct_read_bytes"] says how much went direct and
    stats["files_cached"] how many files "auto" read through the cache.
    progress: a callable, as for save (this rank's reads)."""
    if strict not in _STRICT:
        raise ValueError(f"ckpt: strict={strict!r} is not one of {sorted(_STRICT)}")
    mode, warn, ret = _STRICT[strict]
    entries, objs, bufs, objects = _entries(sharded_state_dict, for_load=True)
    with ends_after_launcher_term("load"):
        st, blobs = _ckpt.load(entries, objs, str(root), -1 if iteration is None else int(iteration),
                               handle_of(comm), mode, float(timeout), bool(verify_hashes), bool(fallback),
                               _direct_read_code(direct_io), progress)
    for b in bufs:
        b.finish_load()
    st["requested_iteration"] = iteration
    if stats is not None:
        stats.update(st)
    _warn_skipped(st, iteration, fallback)
    missing = set(st["missing_keys"])
    loaded = {id(o): (o.data if o.key in missing else pickle.loads(blob)) for (_, o), blob in zip(objects, blobs)}
    out = rebuild(sharded_state_dict, lambda d: d.data if isinstance(d, ShardedTensor) else loaded[id(d)])
    if warn and (st["unexpected_keys"] or (warn == "all" and st["missing_keys"])):
        warnings.warn(f"ckpt load: unexpected keys {st['unexpected_keys']}" +
                      (f", missing keys {st['missing_keys']}" if warn == "all" else ""))
    if ret == "unexpected":
        return out, set(st["unexpected_keys"])
    if ret == "all":
        return out, missing, set(st["unexpected_keys"])
    return out


class FallbackWarning(UserWarning):
    """A load loaded another iteration than the one asked for (fallback=True),
    or passed over newer committed-looking iterations; the message says why."""


def _warn_skipped(st, iteration, fallback):
    """Warns when the load passed over iterations: the caller asked for
    `iteration` (None: the latest) and got st["iteration"]."""
    if not st["skipped"]:
        return
    asked = "the latest iteration" if iteration is None else f"iteration {iteration}"
    how = "fell back to" if fallback else "loaded"
    warnings.warn(f"ckpt load: asked for {asked}, {how} iteration {st['iteration']}; passed over: " +
                  "; ".join(st["skipped"]), FallbackWarning, stacklevel=3)


class _Saver:
    """One C++ AsyncSaver per comm: saves of one comm are serialised."""

    def __init__(self, comm):
        self.cpp = _ckpt.AsyncSaver(async_handle_of(comm))
        self.rank = 0 if comm is None else comm.rank  # for errors raised here
        self.current = None  # the handle in flight
        _SAVERS.append(self)


_SAVERS = []


def shutdown():
    """At exit: joins async saves still in flight (errors dropped: nothing of a
    failed save is published), then frees ckpt's MPI communicators and finalises
    MPI if ckpt initialised it."""
    for s in _SAVERS:
        if s.current is not None:
            try:
                s.current.wait()
            except Exception:  # noqa: BLE001
                pass
    _ckpt.shutdown_mpi()


_LOCAL_SAVER = None


def _saver_of(comm):
    global _LOCAL_SAVER
    if comm is None:
        if _LOCAL_SAVER is None:
            _LOCAL_SAVER = _Saver(None)
        return _LOCAL_SAVER
    if getattr(comm, "_saver", None) is None:
        comm._saver = _Saver(comm)
    return comm._saver


class AsyncSaveHandle:
    """An async save in flight. .start_stats: the blocking part (snapshot).
    .wait(timeout=None) -> stats (raises the save's CkptError; CkptTimeoutError
    if not done within timeout, the save going on); .done() -> bool."""

    def __init__(self, saver, iteration, start_stats):
        self._saver, self.iteration, self.start_stats = saver, iteration, start_stats
        self._stats, self._error = None, None

    def done(self):
        return self._stats is not None or self._error is not None or self._saver.cpp.done()

    def _join(self):
        if self._stats is None and self._error is None:
            try:
                with ends_after_launcher_term(f"async save of iteration {self.iteration}"):
                    self._stats = self._saver.cpp.wait()
            except Exception as e:  # noqa: BLE001 - recorded for every later wait()
                self._error = e
            finally:
                self._saver.current = None

    def wait(self, timeout=None):
        if timeout is not None:
            deadline = time.monotonic() + timeout
            while not self.done():
                if time.monotonic() > deadline:
                    raise CkptTimeoutError(f"async save of iteration {self.iteration} not finished within "
                                           f"{timeout} s (still running)", rank=self._saver.rank,
                                           phase="async_save", reporting_rank=self._saver.rank, op="async_save")
                time.sleep(0.005)
        self._join()
        if self._error is not None:
            raise self._error
        return self._stats

    @property
    def stats(self):
        return self._stats


def reserve_async_save(sharded_state_dict, comm=None):
    """Allocates (and faults in) the snapshot arena of comm's async saver for a
    state shaped like sharded_state_dict, so that the first async_save blocks
    only for the copy. Joins an async save in flight first (raising its error).
    The arena is reused by later saves and grows when a state needs more.
    Local to this rank (not collective). Returns the arena capacity in bytes."""
    saver = _saver_of(comm)
    if saver.current is not None:
        saver.current.wait()
    entries, _, bufs, _ = _entries(sharded_state_dict, for_load=False, op="reserve_async_save")
    capacity = saver.cpp.reserve(entries)
    del bufs  # the buffers stay alive (and unchanged) until the sizes are read
    return capacity


def async_save(sharded_state_dict, root, iteration, comm=None, compress=None, timeout=60.0, metadata=None,
               layout=None, chunk_bytes=0, allow_older=False, chunk_hash=None, direct_io=None, progress=None):
    """Like save, but returns once the state is copied into host snapshot buffers
    (the only blocking part): the caller may overwrite its tensors at once. The
    first save allocates the snapshot arena (start_stats["allocate_seconds"])
    unless reserve_async_save was called for the state first. Saves
    of one comm run one at a time, in call order: a new async_save first joins
    the previous one and raises its error (then this save is not started). A
    failed background save never publishes anything. direct_io: as for save (the
    background write; wait() returns its stats). progress: a callable as for
    save, given the background write's progress (op "async_save") while the
    caller trains; its final event comes when the save is joined (wait(), or
    the next async_save). Collective over comm."""
    saver = _saver_of(comm)
    t0 = time.monotonic()
    if saver.current is not None:
        saver.current.wait()
    waited = time.monotonic() - t0
    entries, objs, bufs, _ = _entries(sharded_state_dict, for_load=False, op="async_save")
    st = saver.cpp.start(entries, objs, str(root), int(iteration), compress or "none", float(timeout),
                         _json(metadata, "metadata"), _json(layout, "layout"), int(chunk_bytes),
                         bool(allow_older), chunk_hash or "sha256", _direct_write_code(direct_io), progress)
    st["wait_previous_seconds"] += waited
    st["blocking_seconds"] += waited
    saver.current = AsyncSaveHandle(saver, int(iteration), st)
    return saver.current
