"""A tiny local stand-in for ckpt's Python descriptors (Megatron-Core style).

TensorShard: `tensor` is this rank's piece of the global tensor `key` with
shape `global_shape`, placed at element offset `global_offset`; the tensor is
a VIEW of live training state (a parameter, a slice of one, an Adam moment),
so loading writes into it in place. `replica_id` is a tuple whose all-zero
value marks the main replica (the copy that is saved); every element of every
global tensor must be covered by exactly one main replica.
`allow_shape_mismatch` marks padded-vocab tensors whose first axis may differ
between the saved and the loading layout (load reads the overlap and
zero-fills).

ObjectShard: a JSON-serialisable Python object at cell `global_offset` of a
grid `global_shape` (e.g. (pp, tp) for per-rank RNG state).

They serve the job's own gather/scatter and reference checkpoint; a ckpt
checkpoint is described by ckpt's torch bridge with the same rules
(ckpt_adapter.py, tests/test_bridge_rules.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class TensorShard:
    key: str
    tensor: torch.Tensor
    global_shape: tuple
    global_offset: tuple
    replica_id: tuple
    allow_shape_mismatch: bool = False
    # (axis, rank_offset, num_parts) per split axis, as MCore from_rank_offsets
    # takes them; kept so the ckpt adapter needs no arithmetic.
    rank_offsets: tuple = ()

    @property
    def is_main_replica(self) -> bool:
        return all(r == 0 for r in self.replica_id)

    def global_slices(self) -> tuple:
        return tuple(slice(o, o + n) for o, n in zip(self.global_offset, self.tensor.shape))


@dataclass
class ObjectShard:
    key: str
    obj: Any
    global_shape: tuple
    global_offset: tuple
    replica_id: tuple

    @property
    def is_main_replica(self) -> bool:
        return all(r == 0 for r in self.replica_id)


def from_rank_offsets(key: str, tensor: torch.Tensor, *rank_offsets: tuple,
                      replica_id: tuple, allow_shape_mismatch: bool = False) -> TensorShard:
    """Like MCore ShardedTensor.from_rank_offsets: each (axis, rank, parts) says
    the local tensor is block `rank` of `parts` equal blocks on `axis`."""
    shape, offset = list(tensor.shape), [0] * tensor.dim()
    for axis, rank, parts in rank_offsets:
        if not 0 <= rank < parts:
            raise ValueError(f"{key}: rank offset {rank} outside [0, {parts}) on axis {axis}")
        offset[axis] = rank * tensor.shape[axis]
        shape[axis] = parts * tensor.shape[axis]
    return TensorShard(key, tensor, tuple(shape), tuple(offset), tuple(replica_id),
                       allow_shape_mismatch, tuple(rank_offsets))


def check_coverage(shards_by_rank: list[list[TensorShard]]) -> None:
    """Raises ValueError unless every global element is covered by exactly one
    main replica and all shards of a key agree on the global shape (MCore's
    validate_sharding_integrity)."""
    counts: dict[str, torch.Tensor] = {}
    for shards in shards_by_rank:
        for s in shards:
            c = counts.setdefault(s.key, torch.zeros(s.global_shape, dtype=torch.int32))
            if tuple(c.shape) != tuple(s.global_shape):
                raise ValueError(f"{s.key}: global shape {s.global_shape} vs {tuple(c.shape)}")
            if s.is_main_replica:
                c[s.global_slices()] += 1
    for key, c in counts.items():
        if not bool((c == 1).all()):
            raise ValueError(f"{key}: {(c == 0).sum()} elements uncovered, "
                             f"{(c > 1).sum()} covered more than once by main replicas")
