"""ckpt_adapter against an in-memory stand-in of the assumed ckpt API
(tests/fake_ckpt.py): a TP1 job saves after 4 steps, a fresh job loads and
continues; every later loss and the final state equal the uninterrupted run
bit for bit (dropout on, so the RNG state is exercised too)."""
from __future__ import annotations

import dataclasses

import torch

import fake_ckpt
from torch_gpt import ckpt_adapter
from torch_gpt.config import TrainConfig, preset
from torch_gpt.parallel import ParallelState
from torch_gpt.state import model_shards
from torch_gpt.train import build_job, state_dict, train_step

CFG = dataclasses.replace(preset("tiny"), attention_dropout=0.1, hidden_dropout=0.1)
TC = TrainConfig(micro_batch=4, global_batch=8)


def _job():
    torch.use_deterministic_algorithms(True)
    return build_job(CFG, TC, ParallelState())


def test_save_load_through_adapter_resumes_bitwise():
    straight = _job()
    losses = [train_step(straight)["loss_hex"] for _ in range(8)]

    first = _job()
    for _ in range(4):
        train_step(first)
    ckpt_adapter.save(first, fake_ckpt, "/mem/run")
    sd = ckpt_adapter.to_ckpt(state_dict(first), fake_ckpt)
    fc1 = [e for e in sd.values() if e.key == "decoder.layers.0.mlp.linear_fc1.weight"]
    assert [e.global_offset for e in fc1] == [(0, 0), (128, 0)]  # W_0 and V_0 of 2 blocks

    second = _job()
    ckpt_adapter.load(second, fake_ckpt, "/mem/run")
    assert second.iteration == 4 and second.sampler.consumed_samples == 32
    resumed = [train_step(second)["loss_hex"] for _ in range(4)]
    assert resumed == losses[4:]
    for a, b in zip(model_shards(straight.model), model_shards(second.model)):
        assert torch.equal(a.tensor, b.tensor)
    meta = fake_ckpt.STORE[("/mem/run", 4)][2]
    assert meta["gpt"]["dtype"] == "fp32" and meta["layout"]["tp"] == 1
