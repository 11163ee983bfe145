"""Parallel layout (TP x DP, pp = 1) and the tensor-parallel autograd operators.

Rank order follows Megatron-Core's default (tp fastest, then dp):
    rank = tp_rank + tp * dp_rank
so a TP group is a run of consecutive ranks and a DP group strides by tp
(ckpt's parallel_state.h uses the same order). Pipeline parallelism is not
implemented: pp = 1, pp_rank = 0 everywhere.

The two conjugate operators of Megatron's tensor parallelism
(megatron/core/tensor_parallel/mappings.py):
  copy_to_tp      "f": identity forward, all-reduce of the gradient backward;
                  placed where a TP-replicated activation enters a
                  column-parallel layer;
  reduce_from_tp  "g": all-reduce forward, identity backward; placed after a
                  row-parallel layer (and the vocab-parallel embedding).
With tp = 1 both are the identity and no collective runs, so a single process
without torch.distributed can run the model (the reference in tests).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist


@dataclass
class ParallelState:
    tp: int = 1
    dp: int = 1
    rank: int = 0
    tp_group: Optional[object] = None   # None: tp == 1 (no collective)
    dp_group: Optional[object] = None   # None: dp == 1

    @property
    def pp(self) -> int:
        return 1

    @property
    def pp_rank(self) -> int:
        return 0

    @property
    def tp_rank(self) -> int:
        return self.rank % self.tp

    @property
    def dp_rank(self) -> int:
        return self.rank // self.tp

    @property
    def world_size(self) -> int:
        return self.tp * self.dp

    def layout_json(self) -> dict:
        """ckpt's "layout" metadata (reshard/gpt_config_json.cc LayoutToJson)."""
        return {"tp": self.tp, "pp": 1, "dp": self.dp, "cp": 1, "ep": 1, "vpp": 1,
                "world": self.world_size}


def build_parallel_state(tp: int, rank: int, world_size: int) -> ParallelState:
    """Creates the TP and DP groups. Collective over the default group: every
    rank must call it with the same tp (torch.distributed.new_group requires all
    ranks to create every group, in the same order)."""
    if world_size % tp:
        raise ValueError(f"world size {world_size} is not divisible by tp={tp}")
    dp = world_size // tp
    ps = ParallelState(tp=tp, dp=dp, rank=rank)
    if world_size == 1:
        return ps
    for d in range(dp):
        ranks = [d * tp + t for t in range(tp)]
        g = dist.new_group(ranks)
        if tp > 1 and rank in ranks:
            ps.tp_group = g
    for t in range(tp):
        ranks = [d * tp + t for d in range(dp)]
        g = dist.new_group(ranks)
        if dp > 1 and rank in ranks:
            ps.dp_group = g
    return ps


def all_reduce(t: torch.Tensor, group, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """In-place all-reduce over `group`; a no-op when the group is None (size 1)."""
    if group is not None:
        dist.all_reduce(t, op=op, group=group)
    return t


class _CopyToTp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return all_reduce(grad.clone(), ctx.group), None


class _ReduceFromTp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        return all_reduce(x.clone(), group)

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def copy_to_tp(x: torch.Tensor, ps: ParallelState) -> torch.Tensor:
    return x if ps.tp_group is None else _CopyToTp.apply(x, ps.tp_group)


def reduce_from_tp(x: torch.Tensor, ps: ParallelState) -> torch.Tensor:
    return x if ps.tp_group is None else _ReduceFromTp.apply(x, ps.tp_group)
