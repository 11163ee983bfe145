#!/usr/bin/python3
"""The function oracle of `ckpt convert` (issue 17): equal logits.

A random Llama-style model is written as Hugging Face files by this script's
own safetensors writer (independent of ckpt's C++ one). Then, on the same
tokens:
  * the reference: a minimal HF-layout Llama forward in PyTorch (below: unfused
    q/k/v, gate/up, repeat_kv GQA, rotate-half RoPE, untied or tied lm_head),
    computing from the HF files;
  * the subject: `ckpt convert HF --to ckpt --layout tp=K[,pp=2]`, then the
    Megatron-style TP model of examples/torch_gpt at TP K, each rank filling
    its parameters from the converted checkpoint through ckpt's Python API
    (`ckpt.load` in place, hashes checked); one case also fills them with
    h5py from the manifest's boxes (no ckpt code at all), and one checkpoint
    is converted through the Python API's `ckpt.convert` instead of the CLI;
must agree in fp32 within LOGITS_TOL at TP1, TP2, TP4 and a TP2xPP2
checkpoint loaded at TP2 (torch_gpt has no PP). Also checked: the
`ckpt convert --to torch` file opens with plain torch.load (weights_only too)
and, scattered with examples/torch_gpt/reference.py, gives the same logits;
`--to hf` files read back by this script's reader give the reference logits.
Negative controls: the converter with its QKV interleave replaced by a naive
[q; k; v] concatenation, or with fc1 built as [up; gate], must FAIL the
comparison (logits differ by far more than the tolerance).

Usage: convert_oracle.py --ckpt <ckpt binary> --ckpt-lab <ckpt-lab binary> --work <scratch dir>
Exit 0 when every check holds; prints the measured differences.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys

import h5py
import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples")
sys.path.insert(0, EXAMPLES)

from torch_gpt import dist_env, launch  # noqa: E402
from torch_gpt.config import GPTConfig  # noqa: E402
from torch_gpt.layers import gather_vocab_logits  # noqa: E402
from torch_gpt.model import GPTModel  # noqa: E402
from torch_gpt.parallel import build_parallel_state  # noqa: E402
from torch_gpt.reference import scatter_global  # noqa: E402
from torch_gpt.rng import RngState  # noqa: E402
from torch_gpt.state import model_shards  # noqa: E402

LOGITS_TOL = 1e-4        # fp32; measured differences are ~1e-6 (summation order)
BROKEN_MIN_DIFF = 1e-2   # a wrong mapping must move the logits by at least this
DIVISIBLE_BY = 16        # vocab 300 pads to 304 / 320 / 320 at TP 1 / 2 / 4

# ---------------------------------------------------------------- safetensors
ST_DTYPES = {"F32": np.float32, "BF16": np.uint16, "F16": np.float16}


def write_safetensors(path: str, tensors: dict[str, np.ndarray]) -> None:
    """The format from its spec: u64 LE header length, JSON header, raw data."""
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        dt = "F32" if a.dtype == np.float32 else "BF16"
        header[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [offset, offset + a.nbytes]}
        offset += a.nbytes
        blobs.append(a.tobytes())
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    with open(path, "rb") as f:
        data = f.read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + b:8 + n + end], dtype=ST_DTYPES[e["dtype"]]).reshape(e["shape"])
    return out


def read_hf_dir(d: str) -> dict[str, torch.Tensor]:
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) \
        else ["model.safetensors"]
    out = {}
    for f in files:
        out.update({k: torch.from_numpy(v.copy()) for k, v in read_safetensors(os.path.join(d, f)).items()})
    return out


# ---------------------------------------------------------- HF Llama reference
def hf_llama_logits(w: dict[str, torch.Tensor], c: dict, tokens: torch.Tensor) -> torch.Tensor:
    """LlamaForCausalLM's forward (eager attention), fp32, from HF tensor names."""
    h, nh, nkv, hd = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
    eps, theta = c["rms_norm_eps"], c["rope_theta"]
    b, s = tokens.shape

    def rms(x, weight):
        return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).double() / hd))
    freqs = torch.outer(torch.arange(s, dtype=torch.float64), inv)
    emb = torch.cat([freqs, freqs], dim=-1)
    cos, sin = emb.cos().float()[None, None], emb.sin().float()[None, None]

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    x = w["model.embed_tokens.weight"][tokens]
    causal = torch.full((s, s), float("-inf")).triu(1)
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        y = rms(x, w[p + "input_layernorm.weight"])
        q = (y @ w[p + "self_attn.q_proj.weight"].T).view(b, s, nh, hd).transpose(1, 2)
        k = (y @ w[p + "self_attn.k_proj.weight"].T).view(b, s, nkv, hd).transpose(1, 2)
        v = (y @ w[p + "self_attn.v_proj.weight"].T).view(b, s, nkv, hd).transpose(1, 2)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k = k[:, :, None].expand(b, nkv, nh // nkv, s, hd).reshape(b, nh, s, hd)  # repeat_kv
        v = v[:, :, None].expand(b, nkv, nh // nkv, s, hd).reshape(b, nh, s, hd)
        att = ((q @ k.transpose(2, 3)) / math.sqrt(hd) + causal).softmax(-1) @ v
        x = x + att.transpose(1, 2).reshape(b, s, nh * hd) @ w[p + "self_attn.o_proj.weight"].T
        y = rms(x, w[p + "post_attention_layernorm.weight"])
        gate, up = y @ w[p + "mlp.gate_proj.weight"].T, y @ w[p + "mlp.up_proj.weight"].T
        x = x + (F.silu(gate) * up) @ w[p + "mlp.down_proj.weight"].T
    x = rms(x, w["model.norm.weight"])
    head = w["model.embed_tokens.weight"] if c["tie_word_embeddings"] else w["lm_head.weight"]
    return x @ head.T


def make_hf_model(d: str, cfg: dict, seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, f, hd = cfg["hidden_size"], cfg["intermediate_size"], cfg["head_dim"]
    q, kv = cfg["num_attention_heads"] * hd, cfg["num_key_value_heads"] * hd
    shapes = {"model.embed_tokens.weight": (cfg["vocab_size"], h), "model.norm.weight": (h,)}
    if not cfg["tie_word_embeddings"]:
        shapes["lm_head.weight"] = (cfg["vocab_size"], h)
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "self_attn.q_proj.weight": (q, h), p + "self_attn.k_proj.weight": (kv, h),
                       p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, q),
                       p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                       p + "mlp.down_proj.weight": (h, f), p + "input_layernorm.weight": (h,),
                       p + "post_attention_layernorm.weight": (h,)})
    w = {}
    for k, shape in shapes.items():
        if len(shape) == 1:  # norms near 1, not exactly (a swapped norm must show)
            w[k] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        else:
            w[k] = torch.randn(shape, generator=g) * (0.5 / math.sqrt(shape[1]))
    os.makedirs(d, exist_ok=True)
    names = sorted(w)  # two files and an index, as HF shards them
    half = len(names) // 2
    parts = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
    for fname, keys in parts.items():
        write_safetensors(os.path.join(d, fname), {k: w[k].numpy() for k in keys})
    json.dump({"metadata": {"total_size": sum(t.numel() * 4 for t in w.values())},
               "weight_map": {k: fn for fn, ks in parts.items() for k in ks}},
              open(os.path.join(d, "model.safetensors.index.json"), "w"))
    json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
    return w


def hf_config(tied: bool, head_dim: int) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
            "intermediate_size": 96, "num_attention_heads": 8, "num_key_value_heads": 4,
            "head_dim": head_dim, "num_hidden_layers": 2, "vocab_size": 300, "tie_word_embeddings": tied,
            "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "torch_dtype": "float32", "hidden_act": "silu",
            "max_position_embeddings": 64}


def torch_gpt_config(c: dict) -> GPTConfig:
    return GPTConfig(vocab_size=c["vocab_size"], hidden=c["hidden_size"], ffn_hidden=c["intermediate_size"],
                     num_layers=c["num_hidden_layers"], num_heads=c["num_attention_heads"],
                     num_query_groups=c["num_key_value_heads"], kv_channels=c["head_dim"], swiglu=True,
                     tied_embeddings=c["tie_word_embeddings"], make_vocab_size_divisible_by=DIVISIBLE_BY,
                     seq_length=32, rope_base=c["rope_theta"], norm_eps=c["rms_norm_eps"])


# ------------------------------------------------- ckpt checkpoint via the API
def load_ckpt_with_api(root: str, shards) -> None:
    """Fills each TensorShard in place with ckpt.load (this rank's boxes only)."""
    import ckpt
    # The shard's own box (ckpt.model_shards' rules: a SwiGLU fc1 is two boxes per rank), not rank offsets.
    sd = {f"{i}:{s.key}": ckpt.ShardedTensor(s.key, s.tensor, s.global_shape, s.global_offset, replica_id=s.replica_id,
                                             allow_shape_mismatch=s.allow_shape_mismatch)
          for i, s in enumerate(shards)}
    ckpt.load(sd, root, strict="raise_all")


# ------------------------------------------------- ckpt checkpoint via h5py
def load_ckpt_with_h5py(root: str, shards) -> None:
    """Fills each TensorShard from the checkpoint's saved boxes (manifest + HDF5)."""
    it = int(open(os.path.join(root, "latest_checkpointed_iteration.txt")).read())
    d = os.path.join(root, f"iter_{it:07d}")
    m = json.load(open(os.path.join(d, "manifest.json")))
    files = {}
    for s in shards:
        entry = m["tensors"][s.key]
        saved_shape = entry["global_shape"]
        if list(saved_shape) != list(s.global_shape) and not entry.get("allow_shape_mismatch"):
            raise ValueError(f"{s.key}: saved {saved_shape}, model {s.global_shape}")
        filled = 0
        for sh in entry["shards"]:
            if "flat_range" in sh:
                raise ValueError(f"{s.key}: a flat-range shard in a model checkpoint")
            lo = [max(a, b) for a, b in zip(sh["global_offset"], s.global_offset)]
            hi = [min(a + n, b + m_) for a, n, b, m_ in zip(sh["global_offset"], sh["local_shape"],
                                                          s.global_offset, s.tensor.shape)]
            if any(a >= b for a, b in zip(lo, hi)):
                continue
            fname = m["files"][sh["file"]]["name"]
            f = files.setdefault(fname, h5py.File(os.path.join(d, fname), "r"))
            src = tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, sh["global_offset"]))
            dst = tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, s.global_offset))
            block = np.asarray(f[sh["dataset"]][src])
            if entry["dtype"] == "bf16":
                block = (block.astype(np.uint32) << 16).view(np.float32)
            with torch.no_grad():
                s.tensor[dst] = torch.from_numpy(np.ascontiguousarray(block, dtype=np.float32))
            filled += int(np.prod([b - a for a, b in zip(lo, hi)]))
        inside = np.prod([min(o + n, g) - o if g > o else 0 for o, n, g in
                          zip(s.global_offset, s.tensor.shape, saved_shape)])
        if filled != inside:
            raise ValueError(f"{s.key}: {filled} of {inside} elements found in the checkpoint")
    for f in files.values():
        f.close()


def tp_logits_worker(out_path: str, jobs: list, tp: int, tokens_path: str) -> None:
    """Each job: (name, torch_gpt config json, source kind, path). Rank 0 saves {name: logits}."""
    torch.set_num_threads(1)
    rank, world = dist_env.init_from_env(timeout_s=60) if tp > 1 else (0, 1)
    tokens = torch.load(tokens_path)
    ps = build_parallel_state(tp, rank, world)
    out = {}
    for name, cfg_json, kind, path in jobs:
        cfg = GPTConfig.from_json(cfg_json)
        model = GPTModel(cfg, ps, RngState(0, ps))
        model.eval()
        shards = model_shards(model)
        if kind == "ckpt":
            load_ckpt_with_api(path, shards)
        elif kind == "ckpt-h5py":
            load_ckpt_with_h5py(path, shards)
        else:  # a torch.save file of global tensors (ckpt convert --to torch)
            scatter_global(shards, torch.load(path))
        with torch.no_grad():
            out[name] = gather_vocab_logits(model(tokens), cfg.vocab_size, ps)
    if rank == 0:
        torch.save(out, out_path)
    if tp > 1:
        dist_env.shutdown()


def logits_at_tp(tp: int, jobs: list, work: str, tokens_path: str) -> dict:
    out = os.path.join(work, f"logits_tp{tp}.pt")
    if tp == 1:
        tp_logits_worker(out, jobs, 1, tokens_path)
    else:
        launch.spawn(tp_logits_worker, tp, (out, jobs, tp, tokens_path), timeout_s=240)
    return torch.load(out)


# ------------------------------------------------------------------ driver
def run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}):\n{r.stdout}{r.stderr}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ckpt", required=True)
    ap.add_argument("--ckpt-lab", required=True, help="the harness program (negative controls)")
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    torch.manual_seed(0)
    tokens = torch.randint(0, 300, (2, 24))
    tokens_path = os.path.join(a.work, "tokens.pt")
    torch.save(tokens, tokens_path)

    models = {"untied": hf_config(False, 8), "tied_hd16": hf_config(True, 16)}
    ref, cfgs = {}, {}
    for name, c in models.items():
        w = make_hf_model(os.path.join(a.work, "hf_" + name), c, seed=len(ref) + 1)
        ref[name] = hf_llama_logits(w, c, tokens)
        cfgs[name] = torch_gpt_config(c).to_json()

    def convert(model: str, layout: str, tag: str, *extra: str) -> str:
        root = os.path.join(a.work, f"ckpt_{model}_{tag}")
        if layout == "tp=4" and not extra:  # the Python API's convert, same library call
            import ckpt
            st = ckpt.convert(os.path.join(a.work, "hf_" + model), root, to="ckpt", layout=layout,
                              vocab_divisible_by=DIVISIBLE_BY)
            print(f"ok   ckpt.convert (Python) {model} -> {layout}: {st['tensors']} tensors, "
                  f"{st['bytes_written']} bytes")
            return root
        exe = a.ckpt_lab if "--negative-control" in extra else a.ckpt  # a harness switch: ckpt-lab
        run([exe, "convert", os.path.join(a.work, "hf_" + model), root, "--to", "ckpt", "--layout", layout,
             "--vocab-divisible-by", str(DIVISIBLE_BY), *extra])
        return root

    jobs = {1: [], 2: [], 4: []}  # TP of the torch model -> (name, cfg, kind, path)
    expect = {}                   # name -> (reference logits, must agree?)
    for tp in (1, 2, 4):
        jobs[tp].append((f"untied tp{tp}", cfgs["untied"], "ckpt", convert("untied", f"tp={tp}", f"tp{tp}")))
        expect[f"untied tp{tp}"] = ("untied", True)
    jobs[2].append(("untied tp2pp2 at tp2", cfgs["untied"], "ckpt", convert("untied", "tp=2,pp=2", "tp2pp2")))
    expect["untied tp2pp2 at tp2"] = ("untied", True)
    jobs[2].append(("untied tp2pp2 at tp2 (h5py)", cfgs["untied"], "ckpt-h5py",
                     os.path.join(a.work, "ckpt_untied_tp2pp2")))
    expect["untied tp2pp2 at tp2 (h5py)"] = ("untied", True)
    for tp in (1, 2):
        jobs[tp].append((f"tied_hd16 tp{tp}", cfgs["tied_hd16"], "ckpt", convert("tied_hd16", f"tp={tp}", f"tp{tp}")))
        expect[f"tied_hd16 tp{tp}"] = ("tied_hd16", True)
    # ckpt -> torch.save -> reference.scatter_global at TP2 (the other loading path)
    pt = os.path.join(a.work, "untied_tp4.pt")
    run([a.ckpt, "convert", os.path.join(a.work, "ckpt_untied_tp4"), pt, "--to", "torch"])
    jobs[2].append(("untied torch.save at tp2", cfgs["untied"], "torch", pt))
    expect["untied torch.save at tp2"] = ("untied", True)
    for control in ("naive-qkv", "swap-gate-up"):
        name = f"negative control {control} tp2"
        jobs[2].append((name, cfgs["untied"], "ckpt",
                        convert("untied", "tp=2", control, "--negative-control", control)))
        expect[name] = ("untied", False)

    failures = 0
    for tp, js in jobs.items():
        got = logits_at_tp(tp, js, a.work, tokens_path)
        for name, logits in got.items():
            model, must_agree = expect[name]
            diff = float((logits - ref[model]).abs().max())
            ok = diff < LOGITS_TOL if must_agree else diff > BROKEN_MIN_DIFF
            failures += not ok
            verdict = "agree" if diff < LOGITS_TOL else "DIFFER"
            print(f"{'ok  ' if ok else 'FAIL'} {name:32s} max|logits - HF reference| = {diff:.3e} ({verdict}; "
                  f"{'must agree within' if must_agree else 'negative control, must differ by >'} "
                  f"{LOGITS_TOL if must_agree else BROKEN_MIN_DIFF:g})")

    # torch.load without ckpt, weights_only too; and ckpt -> HF files give the reference logits.
    state = torch.load(pt, weights_only=True)
    print(f"ok   torch.load(weights_only=True) of {os.path.basename(pt)}: {len(state)} entries, "
          f"embedding {tuple(state['embedding.word_embeddings.weight'].shape)}")
    hf_back = os.path.join(a.work, "hf_back")
    run([a.ckpt, "convert", os.path.join(a.work, "ckpt_untied_tp2pp2"), hf_back, "--to", "hf", "--max-shard-mb", "0.05"])
    back = read_hf_dir(hf_back)
    diff = float((hf_llama_logits(back, json.load(open(os.path.join(hf_back, "config.json"))), tokens)
                  - ref["untied"]).abs().max())
    ok = diff == 0.0
    failures += not ok
    print(f"{'ok  ' if ok else 'FAIL'} ckpt(tp2pp2) -> HF files -> HF forward: max|diff| = {diff:.3e} (must be 0)")
    print(f"{'PASS' if failures == 0 else 'FAIL'}: {failures} failing check(s)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
