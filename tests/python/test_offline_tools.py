"""Offline tools on a checkpoint the Python API wrote (no GPT metadata, so no
layout preset): `ckpt plan` / `ckpt reshard` by per-key rules (--ranks,
--shard KEY_GLOB:axis=A:parts=P) and `ckpt reshard --to-unsharded`
(consolidate to one rank of whole tensors), each fingerprint-equal to the
source and checked element by element; and `ckpt convert --to torch` of a
checkpoint holding Python objects loads with torch.load(weights_only=True)."""
import json
import os
import pickle
import subprocess

import numpy as np
import torch

import ckpt

CKPT = os.environ.get("CKPT_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "cli", "ckpt"))


def cli(*args, rc=0):
    p = subprocess.run([CKPT, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert p.returncode == rc, f"ckpt {' '.join(map(str, args))}: exit {p.returncode}\n{p.stdout}{p.stderr}"
    return p.stdout + p.stderr


def python_checkpoint(root):
    """A Python-API save of 2 'ranks' (tensors split in one process), with an
    object; returns the global tensors."""
    w = torch.arange(64 * 48, dtype=torch.float32).reshape(64, 48) * 0.5
    b = torch.arange(30, dtype=torch.float16) - 7
    e = torch.arange(10, dtype=torch.int64) * 3
    sd = {f"w{i}": ckpt.ShardedTensor.from_rank_offsets("layer.w", w[32 * i:32 * (i + 1)].clone(), (0, i, 2))
          for i in range(2)}
    sd.update({f"b{i}": ckpt.ShardedTensor.from_rank_offsets("layer.b", b[15 * i:15 * (i + 1)].clone(), (0, i, 2))
               for i in range(2)})
    sd["e"] = ckpt.ShardedTensor.from_rank_offsets("step_counts", e)
    sd["o"] = ckpt.ShardedObject("extra", {"lr": 0.1, "names": ["a", "b"]})
    ckpt.save(sd, root, 7, metadata={"who": "python"})
    assert "model" not in ckpt.inspect(root)["metadata"]
    return {"layer.w": w, "layer.b": b, "step_counts": e}


def check_same(root, src, tensors):
    assert ckpt.fingerprint(root)["digest"] == ckpt.fingerprint(src)["digest"]
    for key, want in tensors.items():
        got = ckpt.read_tensor(root, key)
        assert got.dtype == want.dtype and torch.equal(got, want), key
    out = ckpt.load({"o": ckpt.ShardedObject("extra", None)}, root, strict="assume_ok_unexpected")
    assert out["o"] == {"lr": 0.1, "names": ["a", "b"]}


def test_reshard_plan_consolidate_by_rules(tmp_path):
    src = tmp_path / "src"
    tensors = python_checkpoint(src)
    rules = ["--ranks", 4, "--shard", "layer.w:axis=1:parts=4", "--shard", "layer.*:axis=0:parts=2"]
    plan = json.loads(cli("plan", src, *rules, "--per-rank", "--json"))
    assert plan["ranks"] == 4 and len(plan["per_rank"]) == 4
    # Uncompressed, one chunk per saved shard: a rank's quarter of w's columns
    # spans both saved row halves (2 x 32x48 fp32), its half of b is one saved
    # half (15 fp16), step_counts is whole (10 int64); all ranks together read
    # every chunk once.
    assert [r["bytes_read"] for r in plan["per_rank"]] == [2 * 32 * 48 * 4 + 15 * 2 + 80] * 4, plan
    assert plan["bytes_read_total_share_job"] == 2 * 32 * 48 * 4 + 2 * 15 * 2 + 80, plan
    dst = tmp_path / "r4"
    cli("reshard", src, dst, *rules)
    m = ckpt.inspect(dst)
    assert m["layout"] == {"ranks": 4, "shard": ["layer.w:axis=1:parts=4", "layer.*:axis=0:parts=2"]}
    assert m["tensors"]["layer.w"]["shards"] == 4 and m["tensors"]["layer.b"]["shards"] == 2
    assert m["tensors"]["step_counts"]["shards"] == 1
    check_same(dst, src, tensors)
    # Consolidate the resharded one: one rank, one file, whole tensors.
    cons = tmp_path / "whole"
    cli("reshard", dst, cons, "--to-unsharded")
    m = ckpt.inspect(cons)
    assert m["files"] == 1 and all(t["shards"] == 1 for t in m["tensors"].values()), m
    check_same(cons, src, tensors)


def test_rule_errors_write_nothing(tmp_path):
    src = tmp_path / "src"
    python_checkpoint(src)
    out = cli("reshard", src, tmp_path / "x", "--ranks", 2, "--shard", "*:axis=1:parts=2", rc=2)
    assert "'layer.b' of shape [30] has no axis 1" in out, out
    assert not (tmp_path / "x").exists() or not any((tmp_path / "x").glob("iter_*"))
    assert "parts do not divide" in cli("plan", src, "--ranks", 3, "--shard", "layer.w:axis=0:parts=2", rc=2)
    # The GPT preset still needs GPT metadata; the message names the way out.
    assert "--shard" in cli("reshard", src, tmp_path / "y", "--to", "tp=2", rc=2)


def test_convert_to_torch_with_objects_loads_weights_only(tmp_path):
    src = tmp_path / "src"
    tensors = python_checkpoint(src)
    pt = tmp_path / "model.pt"
    cli("convert", src, pt, "--to", "torch")
    state = torch.load(pt, weights_only=True)
    for key, want in tensors.items():
        assert torch.equal(state[key], want), key
    blob = state["extra"]
    assert blob.dtype == torch.uint8 and blob.dim() == 1
    assert pickle.loads(blob.numpy().tobytes()) == {"lr": 0.1, "names": ["a", "b"]}
