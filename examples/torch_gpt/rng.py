"""Per-rank random number generators, like Megatron's CUDA RNG tracker.

Two CPU generators per rank (megatron/core/tensor_parallel/random.py,
model_parallel_cuda_manual_seed; training._set_random_seed):
  default          seed + 100 * pp_rank: the same on every TP (and DP) rank of a
                   stage; used where activations are replicated over TP (hidden
                   and embedding dropout), so TP ranks stay in step;
  tensor_parallel  seed + 2718 + tp_rank: differs per TP rank; used inside the
                   TP region (attention-probability dropout over local heads).
The state is per (pp, tp) rank and identical over DP, which is why a
checkpoint stores it as an object on a (pp, tp) grid with replica id by DP,
and why it cannot carry over a TP change (Megatron drops it then). With all
dropout probabilities 0 the generators are never drawn from.
"""
from __future__ import annotations

import base64

import torch

from .parallel import ParallelState

GENERATOR_NAME = "torch.cpu.mt19937"


class RngState:
    def __init__(self, seed: int, ps: ParallelState):
        self.default = torch.Generator().manual_seed(seed + 100 * ps.pp_rank)
        self.tensor_parallel = torch.Generator().manual_seed(seed + 2718 + ps.tp_rank)

    def state_json(self) -> dict:
        enc = lambda g: base64.b64encode(g.get_state().numpy().tobytes()).decode("ascii")
        return {"generator": GENERATOR_NAME, "default": enc(self.default),
                "tensor_parallel": enc(self.tensor_parallel)}

    def load_json(self, j: dict) -> None:
        if j.get("generator") != GENERATOR_NAME:
            raise ValueError(f"RNG state: unknown generator {j.get('generator')!r}")
        dec = lambda s: torch.frombuffer(bytearray(base64.b64decode(s)), dtype=torch.uint8)
        self.default.set_state(dec(j["default"]))
        self.tensor_parallel.set_state(dec(j["tensor_parallel"]))


def dropout(x: torch.Tensor, p: float, gen: torch.Generator, training: bool) -> torch.Tensor:
    """Inverted dropout drawing from an explicit generator (deterministic)."""
    if not training or p <= 0.0:
        return x
    keep = torch.rand(x.shape, generator=gen) >= p
    return x * keep / (1.0 - p)
