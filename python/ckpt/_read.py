"""Read-only helpers: inspect, verify, fingerprint, read_tensor (one process)."""
import json

from . import _ckpt, _tensors
from ._errors import NotFoundError


def _iter(iteration):
    return -1 if iteration is None else int(iteration)


def inspect(root, iteration=None):
    """The manifest of `iteration` (None: the latest) as a dict: iteration,
    format_version, chunk_hash ("sha256" or "xxh3-128"), layout, metadata, tensors {key: {dtype, shape, shards, allow_shape_mismatch}},
    objects {key: {grid, cells}}, files, stored_bytes, tensor_bytes."""
    m = _ckpt.inspect(str(root), _iter(iteration))
    m["layout"] = json.loads(m["layout"])
    m["metadata"] = json.loads(m["metadata"])
    return m


def verify(root, iteration=None, progress=None):
    """Re-reads and re-hashes every byte: a dict with ok, issues (list of str), counts, and
    direct_read_bytes / files_cached (chunks are read as loads read them: O_DIRECT unless a file
    is mostly in the page cache; CKPT_DIRECT_IO=1/0 forces either). Saves and retention may run
    meanwhile: what they change is not damage - notes (list of str) say what changed, and removed
    is True (ok True, no issues) when the iteration was deleted while it was checked (for the
    latest only after it was removed again and again). progress: a callable, as for ckpt.save
    (bytes read)."""
    return _ckpt.verify(str(root), _iter(iteration), progress)


class Fingerprint:
    """The layout-invariant digest of a checkpoint's global state (ckpt.fingerprint).

    Compares (==, hash) by value - the digest and the per-tensor and per-object
    digests - so two checkpoints of the same state compare equal whatever their
    layout, chunking, compression, chunk hash or iteration. Fields: digest (hex
    str), tensors {key: digest}, objects {key: digest or None (layout-bound,
    left out)}, iteration (the one read). The run's timings are apart, in
    .stats {"bytes_hashed", "seconds"}, and never compared. fp["digest"] (any
    field, or "bytes_hashed" / "seconds") still reads them by name."""

    __slots__ = ("digest", "tensors", "objects", "iteration", "stats")

    def __init__(self, d):
        self.digest = d["digest"]
        self.tensors = dict(d["tensors"])
        self.objects = dict(d["objects"])
        self.iteration = d["iteration"]
        self.stats = {"bytes_hashed": d["bytes_hashed"], "seconds": d["seconds"]}

    def _value(self):
        return self.digest, tuple(sorted(self.tensors.items())), tuple(sorted(self.objects.items()))

    def __eq__(self, other):
        return self._value() == other._value() if isinstance(other, Fingerprint) else NotImplemented

    def __hash__(self):
        return hash(self._value())

    def __getitem__(self, name):
        if name in self.stats:
            return self.stats[name]
        if name in self.__slots__ and name != "stats":
            return getattr(self, name)
        raise KeyError(name)

    def __repr__(self):
        return f"Fingerprint(digest={self.digest!r}, iteration={self.iteration}, tensors={len(self.tensors)}, " \
               f"objects={len(self.objects)})"


def fingerprint(root, iteration=None, progress=None):
    """The layout-invariant digest of the global state (same as `ckpt fingerprint`),
    as a Fingerprint: compares by value; timings apart in .stats. progress: a
    callable, as for ckpt.save (bytes read)."""
    return Fingerprint(_ckpt.fingerprint(str(root), _iter(iteration), progress))


def read_tensor(root, key, iteration=None, offset=None, shape=None, numpy=False):
    """The global tensor `key` (or the box [offset, offset + shape) of it), read
    through the same hash-checked reshard path as a load. Returns a torch tensor
    (bf16 as torch.bfloat16), or with numpy=True a numpy array (bf16 as uint16
    bit patterns: ckpt.bf16_to_float32 converts them)."""
    from ._api import load
    from ._descriptors import ShardedTensor
    m = inspect(root, iteration)
    info = m["tensors"].get(key)
    if info is None:
        raise NotFoundError(f"tensor '{key}' is not in checkpoint iteration {m['iteration']} under '{root}'",
                            rank=0, phase="read_tensor")
    gshape = tuple(info["shape"])
    offset = tuple(offset) if offset is not None else (0,) * len(gshape)
    shape = tuple(shape) if shape is not None else tuple(g - o for g, o in zip(gshape, offset))
    out = _tensors.empty(shape, info["dtype"], numpy)
    desc = ShardedTensor(key, out, gshape, offset, shape, allow_shape_mismatch=info["allow_shape_mismatch"],
                         dtype=info["dtype"])
    load({"t": desc}, root, iteration=m["iteration"], strict="none")
    return out
