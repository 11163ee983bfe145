"""Activation hashes (--hash-activations): where two runs' forward passes first differ.

For the first micro batch of every step, every named point of the forward pass
is gathered to its global (TP-independent) form and hashed (SHA-256 of shape and
fp32 bytes); rank 0 appends one JSON line per step:
  {"iteration": I, "points": [[name, sha256[:16]], ...]}
in forward order. Two runs from the same state (say TP1 and TP2) are compared
point by point with first_difference(): the first point whose hash differs is
where the layouts' arithmetic first diverges.

Points per layer L: L.input_layernorm, L.linear_qkv (column-parallel: the TP
parts concatenated are the global query-group order), L.linear_proj
(row-parallel, after its TP all-reduce), L.pre_mlp_layernorm, L.linear_fc1 (SwiGLU [W_r; V_r] parts reordered to
[W; V]), L.linear_fc2 (after its all-reduce), L.out (the layer's output, residuals
added); before them embedding, after
them final_layernorm and logits (vocab-parallel parts gathered, padding
dropped). Gathers are collectives over the TP group: every rank hashes, rank 0
writes.
"""
from __future__ import annotations

import hashlib
import json

import torch
import torch.distributed as dist

from .layers import gather_vocab_logits
from .parallel import ParallelState


def digest(t: torch.Tensor) -> str:
    h = hashlib.sha256(str(tuple(t.shape)).encode())
    h.update(t.detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def gather_last(t: torch.Tensor, ps: ParallelState) -> list[torch.Tensor]:
    if ps.tp_group is None:
        return [t.detach()]
    parts = [torch.empty_like(t) for _ in range(ps.tp)]
    dist.all_gather(parts, t.detach().contiguous(), group=ps.tp_group)
    return parts


class ActivationHasher:
    def __init__(self, model, ps: ParallelState, path: str | None):
        self.ps, self.armed, self.points = ps, False, []
        self.out = open(path, "a") if path and ps.rank == 0 else None
        self._hook(model.embedding.word_embeddings, "embedding", "full")
        for i, layer in enumerate(model.decoder.layers):
            self._hook(layer.input_layernorm, f"{i}.input_layernorm", "full")
            self._hook(layer.self_attention.linear_qkv, f"{i}.linear_qkv", "split")
            self._hook(layer.self_attention.linear_proj, f"{i}.linear_proj", "full")
            self._hook(layer.pre_mlp_layernorm, f"{i}.pre_mlp_layernorm", "full")
            self._hook(layer.mlp.linear_fc1, f"{i}.linear_fc1", "glu" if model.cfg.swiglu else "split")
            self._hook(layer.mlp.linear_fc2, f"{i}.linear_fc2", "full")
            self._hook(layer, f"{i}.out", "full")
        self._hook(model.decoder.final_layernorm, "final_layernorm", "full")
        vocab = model.cfg.vocab_size
        model.register_forward_hook(
            lambda m, i, o: self._record("logits", gather_vocab_logits(o.detach(), vocab, ps)))

    def _hook(self, module, name: str, kind: str) -> None:
        module.register_forward_hook(lambda m, i, o: self._record(name, self._global(o, kind)))

    def _global(self, t: torch.Tensor, kind: str):
        if not self.armed or kind == "full":
            return t
        parts = gather_last(t, self.ps)
        if kind == "glu":  # each rank holds [W_r; V_r]: global order is [W_0..W_tp-1; V_0..V_tp-1]
            halves = [p.chunk(2, dim=-1) for p in parts]
            parts = [h[0] for h in halves] + [h[1] for h in halves]
        return torch.cat(parts, dim=-1)

    def _record(self, name: str, t: torch.Tensor) -> None:
        if self.armed:
            self.points.append([name, digest(t)])

    def arm(self) -> None:
        """Hash the next forward pass (call before the step's first micro batch)."""
        self.armed, self.points = True, []

    def disarm(self, iteration: int) -> None:
        """Writes the hashes of the forward pass just taken as the line of `iteration`."""
        if self.armed and self.out:
            self.out.write(json.dumps({"iteration": iteration, "points": self.points}) + "\n")
            self.out.flush()
        self.armed = False

    def close(self) -> None:
        if self.out:
            self.out.close()


def read(path: str) -> dict:
    """iteration -> [[name, hash], ...] of a --hash-activations file."""
    with open(path) as f:
        return {r["iteration"]: r["points"] for r in map(json.loads, filter(str.strip, f))}


def first_difference(a: list, b: list) -> tuple[int, str]:
    """(points equal before the first difference, its name); (len, "") when none differs."""
    for i, ((na, ha), (nb, hb)) in enumerate(zip(a, b)):
        if na != nb:
            raise ValueError(f"point {i} is {na} in one run and {nb} in the other")
        if ha != hb:
            return i, na
    return min(len(a), len(b)), ""
