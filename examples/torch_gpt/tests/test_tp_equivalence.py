"""TP1 vs TP2 vs TP4: one global init scattered into each layout gives the same
logits, loss and (gathered) gradients. The TP1 reference runs in this process
without torch.distributed; TP2 and TP4 run as spawned gloo ranks.

Measured on this machine (fp32, tiny model, 4 x 64 tokens): logits max |diff|
3e-7 (TP2) / 2e-7 (TP4), loss |diff| 0 (bitwise equal here), gradients max
|diff| 3e-8 / 4e-8 (2e-7 relative to the largest gradient). The bounds asserted
leave 10-30x headroom.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from torch_gpt import launch
from torch_gpt.config import GPTConfig, preset
from torch_gpt.data import ByteDataset, load_corpus
from torch_gpt.harness import probe_compute, probe_worker
from torch_gpt.reference import global_init

LOGITS_TOL, LOSS_TOL, GRAD_TOL = 1e-5, 1e-6, 5e-7


def _inputs(cfg: GPTConfig, tmp_path, seed=7):
    ds = ByteDataset(load_corpus(), cfg.seq_length, seed=1)
    tokens, targets = ds.batch([0, 1, 2, 3])
    inp = {"globals": global_init(cfg, seed), "tokens": tokens, "targets": targets}
    path = tmp_path / "inputs.pt"
    torch.save(inp, path)
    return inp, path


def _probe_all(cfg: GPTConfig, tmp_path, tps=(2, 4)) -> dict:
    inp, path = _inputs(cfg, tmp_path)
    out = {1: probe_compute(cfg, 1, 0, 1, inp["globals"], inp["tokens"], inp["targets"])}
    for tp in tps:
        res = tmp_path / f"tp{tp}.pt"
        launch.spawn(probe_worker, tp, (str(res), cfg.to_json(), tp, str(path)), timeout_s=60)
        out[tp] = torch.load(res)
    return out


@pytest.fixture(scope="module")
def probes(tmp_path_factory):
    return _probe_all(preset("tiny"), tmp_path_factory.mktemp("probes"))


def _max_grad_diff(a: dict, b: dict) -> tuple[float, float]:
    assert a.keys() == b.keys()
    abs_d = max(float((a[k] - b[k]).abs().max()) for k in a)
    scale = max(float(a[k].abs().max()) for k in a)
    return abs_d, abs_d / scale


def test_logits_and_loss_agree_tp1_tp2_tp4(probes):
    ref = probes[1]
    assert ref["logits"].shape[-1] == preset("tiny").vocab_size
    for tp in (2, 4):
        d_logits = float((probes[tp]["logits"] - ref["logits"]).abs().max())
        d_loss = abs(float(probes[tp]["loss"] - ref["loss"]))
        print(f"TP{tp} vs TP1: logits max|diff| {d_logits:.3e}, loss |diff| {d_loss:.3e} "
              f"(loss {float(ref['loss']):.6f})")
        assert d_logits < LOGITS_TOL and d_loss < LOSS_TOL


def test_gradients_agree_tp1_tp2_tp4(probes):
    for tp in (2, 4):
        abs_d, rel_d = _max_grad_diff(probes[1]["grads"], probes[tp]["grads"])
        print(f"TP{tp} vs TP1: grads max|diff| {abs_d:.3e} (relative to max|grad| {rel_d:.3e})")
        assert abs_d < GRAD_TOL


def test_tied_embeddings_tp2_matches_tp1(tmp_path):
    cfg = dataclasses.replace(preset("tiny"), tied_embeddings=True)
    out = _probe_all(cfg, tmp_path, tps=(2,))
    d_logits = float((out[2]["logits"] - out[1]["logits"]).abs().max())
    abs_d, _ = _max_grad_diff(out[1]["grads"], out[2]["grads"])
    print(f"tied TP2 vs TP1: logits {d_logits:.3e}, grads {abs_d:.3e}")
    assert "output_layer.weight" not in out[2]["grads"]
    assert d_logits < LOGITS_TOL and abs_d < GRAD_TOL
