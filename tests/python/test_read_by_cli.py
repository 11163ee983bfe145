"""Checkpoints written from Python are read by the C++ CLI:
- any Python checkpoint: `ckpt inspect`, `verify`, `fingerprint`, `diff`;
- a GPT checkpoint rewritten from Python (every tensor read with
  ckpt.read_tensor from a CLI-saved one, saved back as whole tensors with its
  metadata, i.e. the GPT config): same fingerprint as the original, and
  `ckpt load` (every element checked against the expected values), `plan`
  and `reshard` work on it."""
import json
import os
import subprocess

import numpy as np
import torch

import ckpt

CKPT = os.environ.get("CKPT_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "cli", "ckpt"))


def cli(*args, rc=0):
    p = subprocess.run([CKPT, *map(str, args)], capture_output=True, text=True, timeout=120)
    assert p.returncode == rc, f"ckpt {' '.join(map(str, args))}: exit {p.returncode}\n{p.stdout}{p.stderr}"
    return p.stdout


def test_inspect_verify_fingerprint_diff(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    w = torch.arange(4096, dtype=torch.float32).reshape(64, 64)
    halves = [w[:32].clone(), w[32:].clone()]
    sd = {f"h{i}": ckpt.ShardedTensor.from_rank_offsets("w", h, (0, i, 2)) for i, h in enumerate(halves)}
    sd["e"] = ckpt.ShardedTensor.from_rank_offsets("e", np.arange(10, dtype=np.int32))
    sd["o"] = ckpt.ShardedObject("o", {"x": 1})
    ckpt.save(sd, a, 1, compress="zstd", metadata={"who": "python"})
    # The same state as one whole tensor: a different layout, the same fingerprint.
    ckpt.save({"w": ckpt.ShardedTensor.from_rank_offsets("w", w),
               "e": ckpt.ShardedTensor.from_rank_offsets("e", np.arange(10, dtype=np.int32)),
               "o": ckpt.ShardedObject("o", {"x": 1})}, b, 1)
    out = cli("inspect", a)
    assert any(line.split()[:4] == ["w", "fp32", "[64,", "64]"] and line.split()[4] == "2"
               for line in out.splitlines()), out
    assert cli("verify", a).startswith("OK: iteration 1, 1 files")
    fa, fb = cli("fingerprint", a).split()[1], cli("fingerprint", b).split()[1]
    assert fa == fb == ckpt.fingerprint(a)["digest"]
    cli("diff", a, b)  # same global state: exit 0
    w[3, 5] += 1
    ckpt.save({"w": ckpt.ShardedTensor.from_rank_offsets("w", w),
               "e": ckpt.ShardedTensor.from_rank_offsets("e", np.arange(10, dtype=np.int32)),
               "o": ckpt.ShardedObject("o", {"x": 1})}, b, 2)
    assert "w" in cli("diff", a, b, rc=1)


def test_gpt_checkpoint_rewritten_from_python_loads_in_cli(tmp_path):
    src, py = tmp_path / "cli", tmp_path / "py"
    cli("save", "--root", src, "--iter", 5, "--model", "tiny", "--layout", "tp=1")
    m = ckpt.inspect(src)
    assert m["metadata"]["model"]["family"] == "megatron_gpt", m["metadata"]
    sd = {}
    for key, info in m["tensors"].items():
        t = ckpt.read_tensor(src, key)
        sd[key] = ckpt.ShardedTensor.from_rank_offsets(key, t, allow_shape_mismatch=info["allow_shape_mismatch"])
    assert not m["objects"], "a CLI GPT save holds no objects"
    ckpt.save(sd, py, 5, metadata=m["metadata"], layout=m["layout"])
    assert ckpt.fingerprint(py)["digest"] == ckpt.fingerprint(src)["digest"]
    assert cli("verify", py).startswith("OK: iteration 5")
    out = cli("load", "--root", py, "--layout", "tp=1")
    assert "mismatches 0" in out, out
    plan = json.loads(cli("plan", py, "--to", "tp=2", "--json"))
    assert plan
    cli("reshard", py, tmp_path / "tp2", "--to", "tp=2")
    assert ckpt.fingerprint(tmp_path / "tp2")["digest"] == ckpt.fingerprint(src)["digest"]
    assert ckpt.inspect(tmp_path / "tp2")["tensors"]["embedding.word_embeddings.weight"]["shards"] == 2
