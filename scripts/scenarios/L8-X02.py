#!/usr/bin/env python3
# title: 格式转换 HF ⇄ MCore：QKV 分组交错与 SwiGLU 拼接
# question: seeds/level8/L8-X02.md
"""A Llama-style HF model (safetensors, GQA, SwiGLU, untied) is converted to a
ckpt checkpoint with Megatron-Core keys (`ckpt convert --to ckpt`, streamed per
target rank and tensor) at TP1 and at TP4 x PP2, and back to HF from the
TP4 x PP2 one (`--to hf`). Measured: the round trip is bitwise; the TP1
checkpoint's fused QKV equals the MCore layout computed here from the HF q/k/v
(per query group: its q heads, then k, then v) and fc1 equals [gate; up] -
element by element; conversion speed.
Negative control: the same import with a naive QKV mapping (q, k, v
concatenated whole, `--negative-control naive-qkv`; shapes all legal): the
layout check counts the misplaced elements, and exporting that checkpoint with
the correct mapping no longer reproduces the HF tensors."""
import glob
import importlib.util
import json
import struct

import os

import numpy as np

import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))
from scenlib import *  # noqa: F403,E402
import h5boxes  # noqa: E402

spec = importlib.util.spec_from_file_location(
    "convert_bench", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "convert_bench.py"))
cb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cb)

layers = 2 if REDUCED else 4
cfg = cb.hf_config(layers)
if REDUCED:
    cfg.update(hidden_size=256, intermediate_size=704, num_attention_heads=8, num_key_value_heads=4, vocab_size=1000)
else:
    cfg.update(hidden_size=1024, intermediate_size=2816, num_attention_heads=16, num_key_value_heads=8, vocab_size=16000)
HF = path("hf")
hf_bytes = cb.write_hf(HF, cfg)
t0 = now()
must("to1", ck("convert", HF, path("c1"), "--to", "ckpt", "--layout", "tp=1", "--mcore", "--json"))
to1_s = now() - t0
must("to8", ck("convert", HF, path("c8"), "--to", "ckpt", "--layout", "tp=4,pp=2", "--mcore", "--json"))
must("back", ck("convert", path("c8"), path("hf_back"), "--to", "hf", "--json"))
must("nto1", ck("convert", HF, path("n1"), "--to", "ckpt", "--layout", "tp=1", "--mcore", "--negative-control",
                "naive-qkv", "--json"))
must("nback", ck("convert", path("n1"), path("hf_nback"), "--to", "hf", "--json"))


def read_safetensors(d):
    out = {}
    for p in sorted(glob.glob(os.path.join(d, "*.safetensors"))):
        with open(p, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            base = 8 + n
            for name, meta in header.items():
                if name == "__metadata__":
                    continue
                a, b = meta["data_offsets"]
                f.seek(base + a)
                out[name] = np.frombuffer(f.read(b - a), dtype=np.uint16).reshape(meta["shape"])
    return out


def read_ckpt(root):
    return {k: v.view(np.uint16) for k, v in h5boxes.assemble(os.path.join(root, "iter_*", "rank_*.h5")).items()}


def expected_qkv(hf, i):
    h, nh, ng = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    hd = h // nh
    q = hf[f"model.layers.{i}.self_attn.q_proj.weight"].reshape(ng, nh // ng * hd, h)
    k = hf[f"model.layers.{i}.self_attn.k_proj.weight"].reshape(ng, hd, h)
    v = hf[f"model.layers.{i}.self_attn.v_proj.weight"].reshape(ng, hd, h)
    return np.concatenate([q, k, v], axis=1).reshape(-1, h)


def layout_check(ck_tensors, hf):
    """(wrong, total) elements of QKV and fc1 against the MCore layout derived from HF."""
    wrong = total = 0
    for i in range(layers):
        qkv = next(a for k, a in ck_tensors.items() if k.endswith("self_attention.linear_qkv.weight"))
        stacked = qkv.ndim == 3
        got_qkv = qkv[i] if stacked else ck_tensors[f"decoder.layers.{i}.self_attention.linear_qkv.weight"]
        fc1 = ck_tensors[next(k for k in ck_tensors if k.endswith("mlp.linear_fc1.weight"))]
        got_fc1 = fc1[i] if stacked else ck_tensors[f"decoder.layers.{i}.mlp.linear_fc1.weight"]
        want_fc1 = np.concatenate([hf[f"model.layers.{i}.mlp.gate_proj.weight"], hf[f"model.layers.{i}.mlp.up_proj.weight"]])
        for got, want in ((got_qkv, expected_qkv(hf, i)), (got_fc1, want_fc1)):
            wrong += int(np.count_nonzero(got != want)) if got.shape == want.shape else want.size
            total += want.size
    return wrong, total


hf = read_safetensors(HF)
back, nback = read_safetensors(path("hf_back")), read_safetensors(path("hf_nback"))
rt_diff = sum(1 for k in hf if k not in back or not np.array_equal(hf[k], back[k]))
nrt_diff = sum(1 for k in hf if k not in nback or not np.array_equal(hf[k], nback[k]))
wrong, total = layout_check(read_ckpt(path("c1")), hf)
nwrong, ntotal = layout_check(read_ckpt(path("n1")), hf)
n = {"hf_bytes": hf_bytes, "hf_tensors": len(hf), "layers": layers, "roundtrip_tensors_differing": rt_diff,
     "layout_wrong_elements": wrong, "layout_elements": total, "to_ckpt_tp1_s": round(to1_s, 2),
     "to_ckpt_mb_per_s": round(hf_bytes / 1e6 / to1_s)}
nc = {"naive_roundtrip_tensors_differing": nrt_diff, "naive_layout_wrong_elements": nwrong,
      "naive_layout_elements": ntotal, "naive_wrong_fraction": round(nwrong / ntotal, 3) if ntotal else 0.0}
checks = [
    ("HF -> ckpt (TP4xPP2) -> HF is bitwise", rt_diff == 0 and len(back) == len(hf)),
    ("TP1 checkpoint: fused QKV is group-interleaved [q_g; k_g; v_g] and fc1 = [gate; up], every element",
     wrong == 0 and total > 0),
]
emit("格式转换 HF ⇄ MCore：QKV 分组交错与 SwiGLU 拼接",
     f"Llama-style HF model ({layers} layers, h={cfg['hidden_size']}, heads {cfg['num_attention_heads']}/"
     f"{cfg['num_key_value_heads']} kv, {hf_bytes} B bf16) → ckpt (MCore keys) at TP1 and TP4xPP2 → HF",
     n, checks,
     "HF 的 q/k/v 与 gate/up 是分开的张量；MCore 的 linear_qkv 按 query group 交错（每组：本组的 q head、k、v），linear_fc1 是 [gate; up]；"
     "转换必须按这个布局重排，正确性要用由 HF 张量算出的期望布局逐元素核对（往返一致只说明两个方向互逆，不证明布局对）",
     "导入时 QKV 按 [q; k; v] 整块拼接的朴素映射（形状全部合法）",
     nc, nrt_diff > 0 and nwrong > 0,
     headline="{hf_tensors} 个 HF 张量（{hf_bytes} B）往返 {roundtrip_tensors_differing} 个不同；QKV/fc1 布局核对 {layout_elements} 个元素 "
              "{layout_wrong_elements} 个错；HF→ckpt {to_ckpt_mb_per_s} MB/s",
     headline_en="{hf_tensors} HF tensors ({hf_bytes} B): round trip {roundtrip_tensors_differing} differ; QKV/fc1 "
                 "layout check {layout_wrong_elements} wrong of {layout_elements}; HF -> ckpt {to_ckpt_mb_per_s} MB/s",
     nc_headline="朴素 QKV 映射：布局核对 "
                 "{nc.naive_layout_elements} 个元素中 {nc.naive_layout_wrong_elements} 个错（{nc.naive_wrong_fraction}），"
                 "再用正确映射导出，{nc.naive_roundtrip_tensors_differing} 个 HF 张量对不上",
     nc_headline_en="naive QKV mapping: layout check {nc.naive_layout_wrong_elements} of {nc.naive_layout_elements} "
                    "wrong ({nc.naive_wrong_fraction}); exported with the correct mapping, "
                    "{nc.naive_roundtrip_tensors_differing} HF tensors differ")
