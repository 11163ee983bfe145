"""Negative control for the SwiGLU rule: a TP2 job trains for a while; its
weights are gathered once with the true descriptors (W_r at block r, V_r at
block tp + r of 2*tp) and once with the naive split (the local [W_r; V_r] as
one axis-0 slice), then each global dict is scattered into a TP1 model. The
true one reproduces the TP2 job's function; the naive one interleaves gate and
up rows wrongly and the loss jumps.
"""
from __future__ import annotations

import torch

from torch_gpt import launch
from torch_gpt.config import TrainConfig, preset
from torch_gpt.data import ByteDataset, load_corpus
from torch_gpt.harness import naive_fc1_worker, probe_compute


def test_naive_fc1_split_changes_the_function(tmp_path):
    cfg = preset("tiny")
    tc = TrainConfig(tp=2, steps=30)
    out = tmp_path / "dump.pt"
    launch.spawn(naive_fc1_worker, 2, (str(out), cfg.to_json(), tc.to_json()), timeout_s=90)
    dump = torch.load(out)
    ds = ByteDataset(load_corpus(), cfg.seq_length, seed=tc.data_seed)
    tokens, targets = ds.batch(list(range(1000, 1008)))  # held-out ids (the run used < 240)
    true = probe_compute(cfg, 1, 0, 1, dump["true"], tokens, targets)
    naive = probe_compute(cfg, 1, 0, 1, dump["naive"], tokens, targets)
    fc1 = "decoder.layers.0.mlp.linear_fc1.weight"
    assert not torch.equal(dump["true"][fc1], dump["naive"][fc1])
    lt, ln = float(true["loss"]), float(naive["loss"])
    d_logits = float((true["logits"] - naive["logits"]).abs().max())
    print(f"TP2 trained {tc.steps} steps: train loss {dump['losses'][0]:.4f} -> "
          f"{dump['losses'][-1]:.4f}; held-out loss at TP1, true fc1 rule {lt:.4f}, "
          f"naive split {ln:.4f} (logits max|diff| {d_logits:.3f})")
    assert ln > lt + 0.1 and d_logits > 0.1
