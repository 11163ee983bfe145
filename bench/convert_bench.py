#!/usr/bin/python3
"""Bench row for `ckpt convert` (issue 17): MB/s and peak RSS of each direction
on a ~1 GB bf16 Llama-shaped model, against reading the same bytes.

  bench/convert_bench.py <ckpt binary> <scratch dir> [results.jsonl] [--layers N]

Writes a random HF model (the `demo` preset's shape: vocab 32000, hidden 2048,
16 heads in 8 KV groups, SwiGLU 5632, 8 layers, untied; 1.02 GB in two
safetensors files), then, in one run on this machine:
  baseline  read every byte of the HF files (16 MiB reads, page cache warm as
            for the conversions, which run right after it);
  hf->ckpt  at tp=1 and tp=4,pp=2 (one process writes every target rank);
  ckpt->hf  from the tp=4,pp=2 checkpoint (QKV/fc1 split back, padding cut);
  ckpt->torch the same checkpoint as one torch.save file.
A conversion writes its output durably (fsync), so a second baseline writes
the same number of bytes with fsync (16 MiB writes). Each row: MB/s of tensor
bytes written, the ratios to both baselines, the process's peak RSS (VmHWM)
and its ratio to the model size. Prints JSON lines (appended to results.jsonl
when given) and a table.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

BF16 = 2


def hf_config(layers: int) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048,
            "intermediate_size": 5632, "num_attention_heads": 16, "num_key_value_heads": 8,
            "num_hidden_layers": layers, "vocab_size": 32000, "tie_word_embeddings": False,
            "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "bfloat16", "hidden_act": "silu"}


def tensor_shapes(c: dict) -> dict[str, tuple]:
    h, f, hd = c["hidden_size"], c["intermediate_size"], c["hidden_size"] // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * hd
    s = {"model.embed_tokens.weight": (c["vocab_size"], h), "model.norm.weight": (h,),
         "lm_head.weight": (c["vocab_size"], h)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s.update({p + "self_attn.q_proj.weight": (h, h), p + "self_attn.k_proj.weight": (kv, h),
                  p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.o_proj.weight": (h, h),
                  p + "mlp.gate_proj.weight": (f, h), p + "mlp.up_proj.weight": (f, h),
                  p + "mlp.down_proj.weight": (h, f), p + "input_layernorm.weight": (h,),
                  p + "post_attention_layernorm.weight": (h,)})
    return s


def write_hf(d: str, c: dict) -> int:
    """Two safetensors files + index, written tensor by tensor (bf16 bits ~ N(0, 0.02))."""
    os.makedirs(d, exist_ok=True)
    shapes = tensor_shapes(c)
    names = sorted(shapes)
    parts = [names[: len(names) // 2], names[len(names) // 2:]]
    rng = np.random.default_rng(1)
    weight_map, total = {}, 0
    for i, part in enumerate(parts):
        fname = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
        header, off = {"__metadata__": {"format": "pt"}}, 0
        for n in part:
            nbytes = int(np.prod(shapes[n])) * BF16
            header[n] = {"dtype": "BF16", "shape": list(shapes[n]), "data_offsets": [off, off + nbytes]}
            off += nbytes
            weight_map[n] = fname
        text = json.dumps(header).encode()
        text += b" " * (-len(text) % 8)
        with open(os.path.join(d, fname), "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text)
            for n in part:
                x = (rng.standard_normal(int(np.prod(shapes[n])), dtype=np.float32) * 0.02)
                f.write((x.view(np.uint32) >> 16).astype(np.uint16).tobytes())
        total += off
    json.dump({"metadata": {"total_size": total}, "weight_map": weight_map},
              open(os.path.join(d, "model.safetensors.index.json"), "w"))
    json.dump(c, open(os.path.join(d, "config.json"), "w"))
    return total


def read_baseline(d: str) -> dict:
    files = [os.path.join(d, f) for f in sorted(os.listdir(d)) if f.endswith(".safetensors")]
    t0, n = time.perf_counter(), 0
    for p in files:
        with open(p, "rb", buffering=0) as f:
            while chunk := f.read(16 << 20):
                n += len(chunk)
    s = time.perf_counter() - t0
    return {"op": "convert baseline: read the HF bytes", "bytes": n, "seconds": s, "mb_per_s": n / 1e6 / s}


def write_baseline(d: str, nbytes: int) -> dict:
    path, block = os.path.join(d, "write_baseline.bin"), np.random.default_rng(2).bytes(16 << 20)
    t0, n = time.perf_counter(), 0
    with open(path, "wb", buffering=0) as f:
        while n < nbytes:
            n += f.write(block[: min(len(block), nbytes - n)])
        os.fsync(f.fileno())
    s = time.perf_counter() - t0
    os.remove(path)
    return {"op": "convert baseline: write+fsync the same bytes", "bytes": n, "seconds": s, "mb_per_s": n / 1e6 / s}


def convert(ckpt: str, src: str, dst: str, to: str, *extra: str) -> dict:
    """Runs one conversion; adds its CPU seconds (user + sys), which a busy
    shared machine inflates less than wall time."""
    shutil.rmtree(dst, ignore_errors=True)
    if os.path.isfile(dst):
        os.remove(dst)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([ckpt, "convert", src, dst, "--to", to, "--json", *extra], check=True,
                         capture_output=True, text=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    j = json.loads(out.strip().splitlines()[-1])
    j["cpu_seconds"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return j


def main() -> int:
    args = [a for a in sys.argv[1:] if not a.startswith("--layers")]
    layers = int(next((a.split("=")[1] for a in sys.argv[1:] if a.startswith("--layers=")), "8"))
    ckpt, work = args[0], args[1]
    results = args[2] if len(args) > 2 else None
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    hf, c = os.path.join(work, "hf"), hf_config(layers)
    model = write_hf(hf, c)
    base = read_baseline(hf)
    wbase = write_baseline(work, model)
    rows = [base, wbase]
    runs = [("hf->ckpt tp=1", hf, os.path.join(work, "tp1"), "ckpt", "--layout", "tp=1"),
            ("hf->ckpt tp=4,pp=2", hf, os.path.join(work, "tp4pp2"), "ckpt", "--layout", "tp=4,pp=2"),
            ("ckpt(tp4pp2)->hf", os.path.join(work, "tp4pp2"), os.path.join(work, "hf_back"), "hf"),
            ("ckpt(tp4pp2)->torch", os.path.join(work, "tp4pp2"), os.path.join(work, "model.pt"), "torch")]
    for name, src, dst, to, *extra in runs:
        j = convert(ckpt, src, dst, to, *extra)
        rows.append({"op": "convert " + name, "bytes": j["bytes_written"], "seconds": j["seconds"],
                     "mb_per_s": j["mb_per_s"], "vs_read": j["mb_per_s"] / base["mb_per_s"],
                     "vs_write": j["mb_per_s"] / wbase["mb_per_s"],
                     "peak_rss_mb": j["peak_rss_bytes"] / 1e6, "model_mb": model / 1e6,
                     "rss_vs_model": j["peak_rss_bytes"] / model, "largest_buffer_mb": j["peak_buffer_bytes"] / 1e6,
                     "cpu_seconds": j["cpu_seconds"], "mb_per_cpu_s": j["bytes_written"] / 1e6 / j["cpu_seconds"]})
    for r in rows:
        print(json.dumps(r))
        if results:
            open(results, "a").write(json.dumps(r) + "\n")
    print(f"\n| direction ({model / 1e9:.2f} GB bf16 model) | MB/s | vs read | vs write+fsync | MB per CPU s | "
          "peak RSS MB | RSS / model |")
    print("|---|---|---|---|---|---|---|")
    print(f"| read the HF files (baseline, warm) | {base['mb_per_s']:.0f} | 1.00 | | | | |")
    print(f"| write+fsync as many bytes (baseline) | {wbase['mb_per_s']:.0f} | | 1.00 | | | |")
    for r in rows[2:]:
        print(f"| {r['op'][8:]} | {r['mb_per_s']:.0f} | {r['vs_read']:.2f} | {r['vs_write']:.2f} | "
              f"{r['mb_per_cpu_s']:.0f} | {r['peak_rss_mb']:.0f} | {r['rss_vs_model']:.3f} |")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
