"""Pure-PyTorch reference for sharded state: global tensors <-> any layout.

gather_global: from every rank's TensorShards, the full global tensors (main
replicas only, coverage checked; padded-vocab tensors cut to vocab_size rows
after checking the padding is zero). scatter_global: the inverse, writing a
global tensor's pieces into a rank's shards in place (vocab tensors zero-padded
to the rank's padded size). Together they move a model between TP sizes, and
prove the layout rules: TP1/TP2/TP4 models filled from one global dict compute
the same function only if the rules are right.

global_init gives the TP-independent initial weights (Megatron's
--use-cpu-initialization idea: draw the master weight whole, then split), so a
run's start does not depend on its layout.

save_reference / load_reference: a one-file torch.save checkpoint of the global
tensors and objects, gathered on rank 0; the stand-in for ckpt until its Python
API exists, and a golden to compare ckpt against later.
"""
from __future__ import annotations

import math
import os

import torch
import torch.distributed as dist

from .config import GPTConfig
from .sharding import ObjectShard, TensorShard, check_coverage


def fnv1a(s: str) -> int:
    """FNV-1a 64 of a key (ckpt/workload/philox.h HashKey): stable, unlike hash()."""
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & ((1 << 64) - 1)
    return h


def global_shapes(cfg: GPTConfig) -> dict[str, tuple]:
    """Unpadded global shape of every model tensor, in module order."""
    h, hn = cfg.hidden, cfg.head_dim()
    fc1 = 2 * cfg.ffn_hidden if cfg.swiglu else cfg.ffn_hidden
    shapes = {"embedding.word_embeddings.weight": (cfg.vocab_size, h)}
    for i in range(cfg.num_layers):
        p = f"decoder.layers.{i}."
        shapes[p + "self_attention.linear_qkv.layer_norm_weight"] = (h,)  # state.checkpoint_key
        shapes[p + "self_attention.linear_qkv.weight"] = (cfg.qkv_rows(), h)
        shapes[p + "self_attention.linear_proj.weight"] = (h, cfg.num_heads * hn)
        shapes[p + "mlp.linear_fc1.layer_norm_weight"] = (h,)
        shapes[p + "mlp.linear_fc1.weight"] = (fc1, h)
        shapes[p + "mlp.linear_fc2.weight"] = (h, cfg.ffn_hidden)
    shapes["decoder.final_layernorm.weight"] = (h,)
    if not cfg.tied_embeddings:
        shapes["output_layer.weight"] = (cfg.vocab_size, h)
    return shapes


def global_init(cfg: GPTConfig, seed: int) -> dict[str, torch.Tensor]:
    """Normal(0, init_std) weights (output projections scaled by 1/sqrt(2L), as
    Megatron's scaled_init_method_normal), ones for norms; one generator per key."""
    out = {}
    for key, shape in global_shapes(cfg).items():
        if key.endswith(("layernorm.weight", "layer_norm_weight")):
            out[key] = torch.ones(shape)
            continue
        std = cfg.init_std
        if key.endswith("linear_proj.weight") or key.endswith("linear_fc2.weight"):
            std /= math.sqrt(2.0 * cfg.num_layers)
        g = torch.Generator().manual_seed((seed * 1000003 + fnv1a(key)) % (1 << 63))
        out[key] = torch.randn(shape, generator=g) * std
    return out


def gather_global(shards_by_rank: list[list[TensorShard]],
                  vocab_size: int) -> dict[str, torch.Tensor]:
    check_coverage(shards_by_rank)
    out: dict[str, torch.Tensor] = {}
    mismatch: set[str] = set()
    for shards in shards_by_rank:
        for s in shards:
            g = out.setdefault(s.key, torch.zeros(s.global_shape, dtype=s.tensor.dtype))
            if s.allow_shape_mismatch:
                mismatch.add(s.key)
            if s.is_main_replica:
                g[s.global_slices()] = s.tensor.detach()
    for key in mismatch:
        if bool(out[key][vocab_size:].ne(0).any()):
            raise ValueError(f"{key}: padded vocab rows >= {vocab_size} are not zero")
        out[key] = out[key][:vocab_size].clone()
    return out


@torch.no_grad()
def scatter_global(shards: list[TensorShard], globals_: dict[str, torch.Tensor]) -> None:
    """Copies each shard's region of its global tensor into shard.tensor."""
    for s in shards:
        g = globals_[s.key]
        if s.allow_shape_mismatch and g.shape[0] < s.global_shape[0]:  # pad vocab rows
            g = torch.cat([g, g.new_zeros((s.global_shape[0] - g.shape[0],) + g.shape[1:])])
        if tuple(g.shape) != tuple(s.global_shape):
            raise ValueError(f"{s.key}: global shape {tuple(g.shape)}, shard expects "
                             f"{tuple(s.global_shape)}")
        s.tensor.copy_(g[s.global_slices()])


def _gather_to_rank0(obj):
    if not dist.is_initialized() or dist.get_world_size() == 1:
        return [obj]
    parts = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, parts, dst=0)
    return parts


def _detached(shards: list[TensorShard]) -> list[TensorShard]:
    return [TensorShard(s.key, s.tensor.detach().clone(), s.global_shape, s.global_offset,
                        s.replica_id, s.allow_shape_mismatch) for s in shards]


def gather_global_to_rank0(shards: list[TensorShard], vocab_size: int):
    """Collective over the default group: the global tensors on rank 0, None elsewhere."""
    parts = _gather_to_rank0(_detached(shards))
    return None if parts is None else gather_global(parts, vocab_size)


def save_reference(path: str, entries: dict, vocab_size: int, metadata: dict) -> None:
    """Collective over the default group: rank 0 writes global tensors and objects."""
    tensors = [s for s in entries.values() if isinstance(s, TensorShard)]
    mine = (_detached(tensors), [o for o in entries.values() if isinstance(o, ObjectShard)])
    parts = _gather_to_rank0(mine)
    if parts is None:
        return
    objects: dict = {}
    for _, objs in parts:
        for o in objs:  # main replicas only: one per cell of a grid (e.g. RNG per TP rank)
            if o.is_main_replica:
                cell = objects.setdefault(o.key, {"grid": o.global_shape, "cells": {}})
                cell["cells"][o.global_offset] = o.obj
    state = {"tensors": gather_global([t for t, _ in parts], vocab_size), "objects": objects,
             "metadata": metadata}
    tmp = path + ".tmp"
    torch.save(state, tmp)
    os.replace(tmp, path)


def load_reference(path: str, entries: dict) -> dict:
    """Fills every TensorShard of `entries` in place; returns {key: obj} for the
    ObjectShards whose grid matches the saved one (others, e.g. RNG state after
    a TP change, are left out, as Megatron drops them)."""
    state = torch.load(path)
    shards = [s for s in entries.values() if isinstance(s, TensorShard)]
    scatter_global(shards, state["tensors"])
    found = {}
    for o in entries.values():
        if isinstance(o, ObjectShard):
            saved = state["objects"].get(o.key)
            if saved is not None and tuple(saved["grid"]) == tuple(o.global_shape):
                found[o.key] = saved["cells"][tuple(o.global_offset)]
    return found
