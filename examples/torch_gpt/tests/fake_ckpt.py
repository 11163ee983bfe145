"""A single-process, in-memory stand-in for ckpt's Python API exactly as
torch_gpt/ckpt_adapter.py assumes it (not ckpt itself): it pins that contract
down in a test until the real module exists. Global tensors are assembled from
main replicas and cut back to each request's box; vocab tensors
(allow_shape_mismatch) keep the overlap and zero-fill."""
from __future__ import annotations

from dataclasses import dataclass

import torch

STORE: dict = {}


@dataclass
class ShardedTensor:
    key: str
    data: torch.Tensor
    global_shape: tuple
    global_offset: tuple
    replica_id: tuple
    allow_shape_mismatch: bool

    @classmethod
    def from_rank_offsets(cls, key, tensor, *rank_offsets, replica_id=(0, 0, 0),
                          allow_shape_mismatch=False):
        shape, offset = list(tensor.shape), [0] * tensor.dim()
        for axis, rank, parts in rank_offsets:
            shape[axis], offset[axis] = tensor.shape[axis] * parts, tensor.shape[axis] * rank
        return cls(key, tensor, tuple(shape), tuple(offset), tuple(replica_id),
                   allow_shape_mismatch)

    def box(self):
        return tuple(slice(o, o + n) for o, n in zip(self.global_offset, self.data.shape))


@dataclass
class ShardedObject:
    key: str
    data: object
    global_shape: tuple
    global_offset: tuple
    replica_id: tuple


def save(sd: dict, root: str, iteration: int, comm=None, metadata=None, layout=None) -> None:
    tensors, objects = {}, {}
    for e in sd.values():
        if isinstance(e, ShardedTensor):
            g = tensors.setdefault(e.key, torch.zeros(e.global_shape, dtype=e.data.dtype))
            if all(r == 0 for r in e.replica_id):
                g[e.box()] = e.data
        else:
            objects[(e.key, e.global_shape, e.global_offset)] = e.data
    STORE[(root, iteration)] = (tensors, objects, metadata)
    STORE[(root, None)] = STORE[(root, iteration)]


@torch.no_grad()
def load(sd: dict, root: str, iteration=None, comm=None) -> dict:
    tensors, objects, _ = STORE[(root, iteration)]
    out = {}
    for name, e in sd.items():
        if isinstance(e, ShardedTensor):
            g = tensors[e.key]
            if e.allow_shape_mismatch and g.shape[0] != e.global_shape[0]:
                fit = torch.zeros(e.global_shape, dtype=g.dtype)
                n = min(g.shape[0], e.global_shape[0])
                fit[:n] = g[:n]
                g = fit
            e.data.copy_(g[e.box()])
            out[name] = e
        else:
            out[name] = objects[(e.key, e.global_shape, e.global_offset)]
    return out
