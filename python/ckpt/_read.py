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
    is mostly in the page cache; CKPT_DIRECT_IO=1/0 forces either). progress: a callable, as for
    ckpt.save (bytes read)."""
    return _ckpt.verify(str(root), _iter(iteration), progress)


def fingerprint(root, iteration=None, progress=None):
    """The layout-invariant digest of the global state (same as `ckpt fingerprint`).
    progress: a callable, as for ckpt.save (bytes read)."""
    return _ckpt.fingerprint(str(root), _iter(iteration), progress)


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
