"""Multi-rank probes used by the tests (importable, so spawned workers can run them).

probe_compute: builds the model at (tp, rank), fills it from one global weight
dict, runs forward + backward on fixed tokens, and returns on rank 0 the full
logits [b, s, vocab_size], the loss and the global gradients (gathered through
the same descriptors a checkpoint uses). probe_worker runs it in a spawned rank
and writes the result with torch.save. naive_fc1_worker trains a job and dumps
its global weights gathered twice: with the true descriptors and with the naive
fc1 split (the negative control).
"""
from __future__ import annotations

import torch

from . import dist_env
from .config import GPTConfig, TrainConfig
from .layers import gather_vocab_logits, vocab_parallel_cross_entropy
from .model import GPTModel
from .parallel import build_parallel_state
from .reference import gather_global_to_rank0, scatter_global
from .rng import RngState
from .state import model_shards
from .train import build_job, set_deterministic, train_step


def probe_compute(cfg: GPTConfig, tp: int, rank: int, world: int,
                  globals_: dict, tokens: torch.Tensor, targets: torch.Tensor):
    ps = build_parallel_state(tp, rank, world)
    model = GPTModel(cfg, ps, RngState(0, ps))
    scatter_global(model_shards(model), globals_)
    logits = model(tokens)
    loss = vocab_parallel_cross_entropy(logits, targets, ps).mean()
    loss.backward()
    full = gather_vocab_logits(logits.detach(), cfg.vocab_size, ps)
    grads = gather_global_to_rank0(model_shards(model, lambda n, p: p.grad), cfg.vocab_size)
    if grads is None:
        return None
    return {"logits": full, "loss": loss.detach(), "grads": grads}


def probe_worker(out_path: str, cfg_json: dict, tp: int, inputs_path: str) -> None:
    set_deterministic()
    rank, world = dist_env.init_from_env(timeout_s=60)
    inp = torch.load(inputs_path)
    res = probe_compute(GPTConfig.from_json(cfg_json), tp, rank, world, inp["globals"],
                        inp["tokens"], inp["targets"])
    if res is not None:
        torch.save(res, out_path)
    dist_env.shutdown()


def naive_fc1_worker(out_path: str, cfg_json: dict, train_json: dict) -> None:
    set_deterministic()
    rank, world = dist_env.init_from_env(timeout_s=60)
    cfg, tc = GPTConfig.from_json(cfg_json), TrainConfig.from_json(train_json)
    job = build_job(cfg, tc, build_parallel_state(tc.tp, rank, world))
    losses = [train_step(job)["loss"] for _ in range(tc.steps)]
    true = gather_global_to_rank0(model_shards(job.model), cfg.vocab_size)
    naive = gather_global_to_rank0(model_shards(job.model, naive_fc1=True), cfg.vocab_size)
    if rank == 0:
        torch.save({"true": true, "naive": naive, "losses": losses}, out_path)
    dist_env.shutdown()
