"""Sharded state dict descriptors, after Megatron-Core's dist_checkpointing.

ShardedTensor: which part of a global tensor this rank holds, and the local
tensor itself (torch or numpy; load writes into it in place).
  box   = [global_offset, global_offset + local_shape) of global_shape
  flat  = optionally only the flat (row-major) range [begin, end) of that box
          (distributed-optimizer fragments); the local data then holds
          end - begin elements.
replica_id: an int or a tuple; all zeros = the main replica (the one written).
ShardedObject: any picklable object at a cell of a grid of objects (per-rank
RNG state, args, data-iterator state).
A sharded state dict is a (nested) dict/list of these and plain values.
"""
import pickle

from . import _tensors


def _replica(replica_id):
    if isinstance(replica_id, int):
        return (replica_id,)
    return tuple(int(r) for r in replica_id)


def _ints(values, what):
    try:
        return tuple(int(v) for v in values)
    except TypeError:
        raise TypeError(f"ckpt: {what} must be a sequence of ints, got {values!r}") from None


class ShardedTensor:
    """A rank's shard of a global tensor (see the module docstring)."""

    def __init__(self, key, data, global_shape, global_offset, local_shape=None, replica_id=0,
                 flat_range=None, allow_shape_mismatch=False, dtype=None):
        self.key = str(key)
        self.data = data
        self.dtype = _tensors.dtype_name(data, dtype)
        self.global_shape = _ints(global_shape, "global_shape")
        self.global_offset = _ints(global_offset, "global_offset")
        self.local_shape = _tensors.shape_of(data) if local_shape is None else _ints(local_shape, "local_shape")
        self.replica_id = _replica(replica_id)
        self.flat_range = None if flat_range is None else _ints(flat_range, "flat_range")
        self.allow_shape_mismatch = bool(allow_shape_mismatch)
        self._check()

    def _check(self):
        n = 1
        for d in (self.local_shape if self.flat_range is None else ()):
            n *= d
        if self.flat_range is not None:
            n = self.flat_range[1] - self.flat_range[0]
        have = 1
        for d in _tensors.shape_of(self.data):
            have *= d
        if have != n:
            raise ValueError(f"ckpt: tensor '{self.key}': local data has {have} elements, the descriptor "
                             f"says {n} (local_shape {self.local_shape}, flat_range {self.flat_range})")
        if not (len(self.global_shape) == len(self.global_offset) == len(self.local_shape)):
            raise ValueError(f"ckpt: tensor '{self.key}': global_shape {self.global_shape}, global_offset "
                             f"{self.global_offset} and local_shape {self.local_shape} differ in rank")

    @classmethod
    def from_rank_offsets(cls, key, data, *rank_offsets, replica_id=0, prepend_axis_num=0,
                          allow_shape_mismatch=False, dtype=None):
        """MCore's from_rank_offsets: each (axis, rank_offset, num_parts) says the
        global tensor is split in num_parts along axis and this is part rank_offset:
        global_shape[axis] = local[axis] * num_parts, offset = local[axis] * rank_offset.
        The first prepend_axis_num axes exist only globally (local size 1)."""
        local = (1,) * prepend_axis_num + _tensors.shape_of(data)
        gshape, goff = _rank_offset_box(key, local, rank_offsets)
        return cls(key, data, gshape, goff, local, replica_id, None, allow_shape_mismatch, dtype)

    @classmethod
    def from_flat_range(cls, key, data, global_shape, global_offset, flat_start, flat_stop, replica_id=0,
                        local_shape=None, allow_shape_mismatch=False, dtype=None):
        """A fragment [flat_start, flat_stop) of the row-major flattened box
        [global_offset, global_offset + local_shape) (default local_shape: the
        whole global_shape); `data` holds flat_stop - flat_start elements."""
        box = global_shape if local_shape is None else local_shape
        return cls(key, data, global_shape, global_offset, box, replica_id, (flat_start, flat_stop),
                   allow_shape_mismatch, dtype)

    @classmethod
    def from_rank_offsets_flat(cls, key, data, non_flat_local_shape, *rank_offsets, flattened_range,
                               replica_id=0, prepend_axis_num=0, allow_shape_mismatch=False, dtype=None):
        """MCore's from_rank_offsets_flat: the box as from_rank_offsets would make
        it for a local tensor of non_flat_local_shape, narrowed to flattened_range
        (a slice)."""
        local = (1,) * prepend_axis_num + _ints(non_flat_local_shape, "non_flat_local_shape")
        gshape, goff = _rank_offset_box(key, local, rank_offsets)
        return cls(key, data, gshape, goff, local, replica_id, (flattened_range.start, flattened_range.stop),
                   allow_shape_mismatch, dtype)

    @property
    def is_main_replica(self):
        return all(r == 0 for r in self.replica_id)

    def __repr__(self):
        flat = f", flat_range={self.flat_range}" if self.flat_range else ""
        return (f"ShardedTensor(key={self.key!r}, dtype={self.dtype}, global_shape={self.global_shape}, "
                f"global_offset={self.global_offset}, local_shape={self.local_shape}{flat}, "
                f"replica_id={self.replica_id})")


def _rank_offset_box(key, local, rank_offsets):
    """(global_shape, global_offset) of a local box split as rank_offsets say."""
    gshape, goff = list(local), [0] * len(local)
    seen = set()
    for ro in rank_offsets:
        axis, rank, parts = (int(v) for v in ro)
        if axis in seen or not 0 <= axis < len(local):
            raise ValueError(f"ckpt: tensor '{key}': bad or repeated axis {axis} in rank_offsets {rank_offsets}")
        if not 0 <= rank < parts:
            raise ValueError(f"ckpt: tensor '{key}': rank offset {rank} not in [0, {parts}) on axis {axis}")
        seen.add(axis)
        gshape[axis], goff[axis] = local[axis] * parts, local[axis] * rank
    return gshape, goff


class ShardedObject:
    """A picklable object at cell global_offset of a grid of global_shape."""

    def __init__(self, key, data, global_shape=(1,), global_offset=(0,), replica_id=0):
        self.key = str(key)
        self.data = data
        self.global_shape = _ints(global_shape, "global_shape")
        self.global_offset = _ints(global_offset, "global_offset")
        self.replica_id = _replica(replica_id)
        if len(self.global_shape) != len(self.global_offset):
            raise ValueError(f"ckpt: object '{key}': global_shape and global_offset differ in rank")

    @property
    def is_main_replica(self):
        return all(r == 0 for r in self.replica_id)

    def _entry(self, with_data):
        blob = pickle.dumps(self.data, protocol=4) if with_data else None
        return (self.key, self.global_shape, self.global_offset, self.replica_id, blob)

    def __repr__(self):
        return (f"ShardedObject(key={self.key!r}, global_shape={self.global_shape}, "
                f"global_offset={self.global_offset}, replica_id={self.replica_id})")


def _path_str(path):
    return "state" + "".join(f"[{p!r}]" for p in path)


def flatten(state, strict_leaves=None):
    """[(path, ShardedTensor)], [(path, ShardedObject)] of a nested dict/list.
    strict_leaves: the API call (e.g. "save") for which any other leaf (a plain
    value such as "step": 5, a bare tensor, None) raises TypeError naming its
    path, instead of being passed over: a save must never drop state silently."""
    tensors, objects = [], []

    def walk(node, path):
        if isinstance(node, ShardedTensor):
            tensors.append((path, node))
        elif isinstance(node, ShardedObject):
            objects.append((path, node))
        elif isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + (k,))
        elif isinstance(node, (list, tuple)):
            for i, v in enumerate(node):
                walk(v, path + (i,))
        elif strict_leaves:
            raise TypeError(f"ckpt.{strict_leaves}: {_path_str(path)} is a {type(node).__name__}, not a "
                            "ckpt.ShardedTensor or ckpt.ShardedObject, so it cannot be saved; wrap it (a "
                            "tensor in ShardedTensor.from_rank_offsets, any other value in "
                            "ShardedObject(key, value)) or leave it out of the state dict")

    walk(state, ())
    return tensors, objects


def rebuild(state, replace):
    """A copy of the nested dict/list `state` with every descriptor d replaced by replace(d)."""
    if isinstance(state, (ShardedTensor, ShardedObject)):
        return replace(state)
    if isinstance(state, dict):
        return {k: rebuild(v, replace) for k, v in state.items()}
    if isinstance(state, list):
        return [rebuild(v, replace) for v in state]
    if isinstance(state, tuple):
        return tuple(rebuild(v, replace) for v in state)
    return state
