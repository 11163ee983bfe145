"""AdamW with explicit fp32 state, an LR schedule, DP gradient averaging and
global-norm gradient clipping.

AdamW keeps, per parameter name, plain fp32 tensors exp_avg and exp_avg_sq of
the parameter's LOCAL shape, and one int64 step tensor [1], so every piece of
optimizer state can be described with the parameter's own sharding
(state.sharded_state_dict) and loaded in place. The update is torch.optim.AdamW's
(decoupled weight decay, bias correction); like Megatron, weight decay skips 1-D
parameters (norm weights). Training is fp32, so the "fp32 main parameter" of
mixed precision is the parameter itself.

LrScheduler reproduces megatron/core/optimizer_param_scheduler.py get_lr
(linear warmup from 0, then cosine/linear/constant decay to min_lr) exactly as
ckpt's C++ workload does (ckpt/workload/lr_schedule.h): the lr of a step is
lr() before step(); its state JSON {"config": ..., "num_steps": n} has the
same fields, and loading is strict about the config.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .parallel import ParallelState, all_reduce


class AdamW:
    def __init__(self, named_params, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.0):
        self.params = dict(named_params)
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay
        self.exp_avg = {n: torch.zeros_like(p, dtype=torch.float32) for n, p in self.params.items()}
        self.exp_avg_sq = {n: torch.zeros_like(p, dtype=torch.float32)
                           for n, p in self.params.items()}
        self.step_tensor = torch.zeros(1, dtype=torch.int64)  # a tensor: loads in place

    @property
    def step_count(self) -> int:
        return int(self.step_tensor[0])

    @torch.no_grad()
    def step(self, lr: float) -> None:
        self.step_tensor += 1
        b1, b2 = self.betas
        bc1, bc2 = 1 - b1 ** self.step_count, 1 - b2 ** self.step_count
        for name, p in self.params.items():
            g = p.grad if p.grad is not None else torch.zeros_like(p)
            if p.dim() > 1 and self.weight_decay:
                p.mul_(1 - lr * self.weight_decay)
            m, v = self.exp_avg[name], self.exp_avg_sq[name]
            m.mul_(b1).add_(g, alpha=1 - b1)
            v.mul_(b2).addcmul_(g, g, value=1 - b2)
            denom = (v.sqrt() / math.sqrt(bc2)).add_(self.eps)
            p.addcdiv_(m, denom, value=-lr / bc1)

    @property
    def state(self) -> dict:
        """torch.optim's view, {parameter: {state name: tensor}}, for ckpt's torch
        bridge: the fp32 main parameter (the parameter itself: fp32 training)
        and both moments, the live tensors (a load writes into them)."""
        return {p: {"fp32_param": p.data, "exp_avg": self.exp_avg[n], "exp_avg_sq": self.exp_avg_sq[n]}
                for n, p in self.params.items()}

    @property
    def param_groups(self) -> list:
        """torch.optim's view: one group, its hyper-parameters (recorded, not loaded)."""
        return [{"params": list(self.params.values()), "betas": list(self.betas), "eps": self.eps,
                 "weight_decay": self.weight_decay}]

    def zero_grad(self) -> None:
        for p in self.params.values():
            p.grad = None


@dataclass
class LrConfig:
    max_lr: float = 3e-3
    min_lr: float = 3e-4
    warmup_steps: int = 4
    decay_steps: int = 200
    style: str = "cosine"

    def to_json(self) -> dict:
        return {"max_lr": self.max_lr, "min_lr": self.min_lr, "warmup_steps": self.warmup_steps,
                "decay_steps": self.decay_steps, "style": self.style}


class LrScheduler:
    def __init__(self, cfg: LrConfig):
        if not (0 <= cfg.min_lr <= cfg.max_lr) or not (0 <= cfg.warmup_steps < cfg.decay_steps):
            raise ValueError(f"bad lr schedule {cfg}")
        if cfg.style not in ("constant", "linear", "cosine"):
            raise ValueError(f"unknown lr style '{cfg.style}'")
        self.cfg, self.num_steps = cfg, 0

    def lr(self) -> float:
        c, n = self.cfg, self.num_steps
        if c.warmup_steps > 0 and n <= c.warmup_steps:
            return c.max_lr * n / c.warmup_steps
        if c.style == "constant":
            return c.max_lr
        if n > c.decay_steps:
            return c.min_lr
        ratio = (n - c.warmup_steps) / (c.decay_steps - c.warmup_steps)
        coeff = 1.0 - ratio if c.style == "linear" else 0.5 * (math.cos(math.pi * ratio) + 1.0)
        return c.min_lr + coeff * (c.max_lr - c.min_lr)

    def step(self, increment: int = 1) -> None:
        self.num_steps += increment

    def state_json(self) -> dict:
        return {"config": self.cfg.to_json(), "num_steps": self.num_steps}

    def load_json(self, j: dict) -> None:
        if j["config"] != self.cfg.to_json():
            raise ValueError(f"lr schedule differs from the checkpoint's: {j['config']} vs "
                             f"{self.cfg.to_json()}")
        self.num_steps = int(j["num_steps"])


def average_dp_grads(params, ps: ParallelState) -> None:
    """Averages gradients over the DP group with one flat all-reduce (one
    buffer in a fixed order, so the reduction is deterministic)."""
    if ps.dp_group is None:
        return
    grads = [p.grad for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    all_reduce(flat, ps.dp_group).div_(ps.dp)
    pos = 0
    for g in grads:
        g.copy_(flat[pos:pos + g.numel()].view_as(g))
        pos += g.numel()


def clip_grad_norm(named_params, max_norm: float, ps: ParallelState) -> float:
    """Global L2 norm over the whole model (Megatron get_grad_norm_fp32: TP-split
    params counted on every TP rank, TP-replicated ones on TP rank 0 only, then
    an all-reduce over TP); scales grads by max_norm / norm when above."""
    sq = torch.zeros(1, dtype=torch.float64)
    for name, p in named_params:
        if getattr(p, "tensor_model_parallel", False) or ps.tp_rank == 0:
            sq += p.grad.double().pow(2).sum()
    norm = float(all_reduce(sq, ps.tp_group).sqrt())
    if max_norm > 0 and norm > max_norm:
        for _, p in named_params:
            p.grad.mul_(max_norm / (norm + 1e-6))
    return norm
