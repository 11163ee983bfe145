"""Tensor-parallel building blocks with Megatron-Core semantics (pure PyTorch).

Local weight shapes (tp = TP size, r = TP rank):
  VocabParallelEmbedding  [Vp/tp, h]   rows [r*Vp/tp, (r+1)*Vp/tp) of the padded vocab
  ColumnParallelLinear    [out/tp, in] (axis 0 split; input replicated over TP)
  RowParallelLinear       [out, in/tp] (axis 1 split; output all-reduced over TP)
  RMSNorm                 [h]          (replicated over TP)
Parameters are created empty (zeros): values come from reference.scatter_global
(a TP-independent global init) or from a checkpoint.

vocab_parallel_cross_entropy follows megatron/core/tensor_parallel/
cross_entropy.py (_VocabParallelCrossEntropy: max and sum all-reduces over TP,
softmax - one-hot gradient). Unlike Megatron, logits of padded vocab ids
(>= vocab_size) are masked to -inf first, so the function does not depend on
how much padding a TP size adds (Megatron lets padded rows learn large negative
logits instead); padded rows then get zero gradient and stay zero.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

from .parallel import ParallelState, all_reduce, copy_to_tp, reduce_from_tp


class _UnorderedEmbedding(torch.autograd.Function):
    """F.embedding whose backward adds the token rows into the weight gradient in
    an order drawn from os.urandom on every call - what an atomicAdd scatter
    (CUDA's embedding backward outside deterministic mode) does: the same
    numbers summed in another order, so two runs differ in the last bits."""

    @staticmethod
    def forward(ctx, idx, weight):
        ctx.save_for_backward(idx)
        ctx.rows = weight.shape[0]
        return F.embedding(idx, weight)

    @staticmethod
    def backward(ctx, grad):
        (idx,) = ctx.saved_tensors
        flat, rows = idx.reshape(-1), grad.reshape(-1, grad.shape[-1])
        gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        order = torch.randperm(flat.numel(), generator=gen)
        gw = torch.zeros(ctx.rows, rows.shape[-1], dtype=rows.dtype)
        gw.index_add_(0, flat[order], rows[order])
        return None, gw


class VocabParallelEmbedding(torch.nn.Module):
    def __init__(self, padded_vocab: int, hidden: int, ps: ParallelState):
        super().__init__()
        self.nondeterministic = False  # --nondeterministic: unordered gradient accumulation
        self.ps = ps
        self.per_rank = padded_vocab // ps.tp
        self.start = ps.tp_rank * self.per_rank
        self.weight = torch.nn.Parameter(torch.zeros(self.per_rank, hidden))
        self.weight.tensor_model_parallel = True

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        outside = (tokens < self.start) | (tokens >= self.start + self.per_rank)
        local = (tokens - self.start).masked_fill(outside, 0)
        emb = (_UnorderedEmbedding.apply(local, self.weight) if self.nondeterministic
               else F.embedding(local, self.weight)).masked_fill(outside.unsqueeze(-1), 0.0)
        return reduce_from_tp(emb, self.ps)


class ColumnParallelLinear(torch.nn.Module):
    """y_local = x W_local^T with x replicated over TP; the output stays split."""

    def __init__(self, in_features: int, out_global: int, ps: ParallelState):
        super().__init__()
        if out_global % ps.tp:
            raise ValueError(f"output size {out_global} not divisible by tp={ps.tp}")
        self.ps = ps
        self.weight = torch.nn.Parameter(torch.zeros(out_global // ps.tp, in_features))
        self.weight.tensor_model_parallel = True  # Megatron's attribute: split over TP

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(copy_to_tp(x, self.ps), self.weight)


class RowParallelLinear(torch.nn.Module):
    """y = sum over TP of x_local W_local^T; x arrives split on its last axis."""

    def __init__(self, in_global: int, out_features: int, ps: ParallelState):
        super().__init__()
        if in_global % ps.tp:
            raise ValueError(f"input size {in_global} not divisible by tp={ps.tp}")
        self.ps = ps
        self.weight = torch.nn.Parameter(torch.zeros(out_features, in_global // ps.tp))
        self.weight.tensor_model_parallel = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return reduce_from_tp(F.linear(x, self.weight), self.ps)


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(seq: int, head_dim: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [seq, head_dim] for rotate-half RoPE (MCore's default, not interleaved)."""
    inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    ang = torch.outer(torch.arange(seq, dtype=torch.float64), inv)
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().float(), ang.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [b, s, heads, hn]; cos/sin [s, hn]."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


class _VocabParallelCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits, target, start, group):
        logits_max = all_reduce(logits.max(dim=-1)[0], group, dist.ReduceOp.MAX)
        shifted = logits - logits_max.unsqueeze(-1)
        per_rank = logits.shape[-1]
        outside = (target < start) | (target >= start + per_rank)
        local_target = (target - start).masked_fill(outside, 0)
        predicted = shifted.gather(-1, local_target.unsqueeze(-1)).squeeze(-1)
        predicted = all_reduce(predicted.masked_fill(outside, 0.0), group)
        exp = shifted.exp()
        sum_exp = all_reduce(exp.sum(dim=-1), group)
        softmax = exp / sum_exp.unsqueeze(-1)
        ctx.save_for_backward(softmax, outside, local_target)
        return sum_exp.log() - predicted

    @staticmethod
    def backward(ctx, grad_loss):
        softmax, outside, local_target = ctx.saved_tensors
        one_hot = torch.zeros_like(softmax).scatter_(
            -1, local_target.unsqueeze(-1), (~outside).unsqueeze(-1).to(softmax.dtype))
        return (softmax - one_hot) * grad_loss.unsqueeze(-1), None, None, None


def mask_padded_vocab(logits: torch.Tensor, vocab_size: int, ps: ParallelState) -> torch.Tensor:
    """Sets logits of padded vocab ids (global id >= vocab_size) to -inf."""
    per_rank = logits.shape[-1]
    ids = torch.arange(ps.tp_rank * per_rank, (ps.tp_rank + 1) * per_rank)
    return logits.masked_fill(ids >= vocab_size, float("-inf"))


def vocab_parallel_cross_entropy(logits: torch.Tensor, target: torch.Tensor,
                                 ps: ParallelState) -> torch.Tensor:
    """Per-token loss [b, s] from local logits [b, s, Vp/tp] (padded ids masked)."""
    start = ps.tp_rank * logits.shape[-1]
    return _VocabParallelCrossEntropy.apply(logits, target, start, ps.tp_group)


def gather_vocab_logits(logits: torch.Tensor, vocab_size: int, ps: ParallelState) -> torch.Tensor:
    """Full logits [b, s, vocab_size] on every TP rank (for checks; no autograd)."""
    if ps.tp_group is not None:
        parts = [torch.empty_like(logits) for _ in range(ps.tp)]
        dist.all_gather(parts, logits.contiguous(), group=ps.tp_group)
        logits = torch.cat(parts, dim=-1)
    return logits[..., :vocab_size]
