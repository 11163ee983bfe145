"""ckpt_adapter (the job through ckpt's torch bridge), in one process: a TP1
job saves after 4 steps, a fresh job loads and continues; every later loss
and the final state equal the uninterrupted run bit for bit (dropout on, so
the RNG state is exercised too); the checkpoint keeps state.py's format."""
from __future__ import annotations

import dataclasses

import torch

from torch_gpt import ckpt_adapter
from torch_gpt.ckpt_io import import_ckpt
from torch_gpt.config import TrainConfig, preset
from torch_gpt.parallel import ParallelState
from torch_gpt.state import model_shards
from torch_gpt.train import build_job, train_step

CFG = dataclasses.replace(preset("tiny"), attention_dropout=0.1, hidden_dropout=0.1)
TC = TrainConfig(micro_batch=4, global_batch=8)


def _job():
    torch.use_deterministic_algorithms(True)
    return build_job(CFG, TC, ParallelState())


def test_save_load_through_adapter_resumes_bitwise(tmp_path):
    ckpt = import_ckpt()
    straight = _job()
    losses = [train_step(straight)["loss_hex"] for _ in range(8)]

    first = _job()
    for _ in range(4):
        train_step(first)
    ckpt_adapter.save(first, ckpt, ckpt_adapter.torch_state(first, ckpt), tmp_path)
    sd = ckpt.torch_bridge.flat_state(ckpt_adapter.torch_state(first, ckpt).sharded_state_dict())
    fc1 = [e for e in sd.values() if e.key == "decoder.layers.0.mlp.linear_fc1.weight"]
    assert [e.global_offset for e in fc1] == [(0, 0), (128, 0)]  # W_0 and V_0 of 2 blocks

    second = _job()
    ckpt_adapter.load(second, ckpt, ckpt_adapter.torch_state(second, ckpt), tmp_path)
    assert second.iteration == 4 and second.sampler.consumed_samples == 32
    resumed = [train_step(second)["loss_hex"] for _ in range(4)]
    assert resumed == losses[4:]
    for a, b in zip(model_shards(straight.model), model_shards(second.model)):
        assert torch.equal(a.tensor, b.tensor)
    info = ckpt.inspect(tmp_path)
    meta = info["metadata"]
    assert meta["model"]["family"] == "megatron_gpt" and meta["model"]["config"]["dtype"] == "fp32"
    assert meta["layout"]["tp"] == 1
    keys = set(info["tensors"]) | set(info["objects"])
    for want in ("optimizer.step", "resume.args", "resume.rng_state", "resume.data_iterator",
                 "optimizer.state.fp32_param.decoder.layers.0.self_attention.linear_qkv.layer_norm_weight",
                 "optimizer.state.exp_avg_sq.embedding.word_embeddings.weight"):
        assert want in keys, want
