#!/usr/bin/python3
"""bench/out/results.jsonl (one run of bench/run.py) -> the tables and plots.

Every figure is the median over the run's rounds with [min-max]; a ratio is
taken between two rows of the same round (so machine load hits both alike)
and its median [min-max] over the rounds is printed. MB/s are logical bytes
(the tensors' bytes) for ckpt and the peers, file bytes for dd (ckpt's own
files: logical + <1 % HDF5 metadata); zstd rows give the stored size beside.

  report.py <results.jsonl> <out dir>
"""
from __future__ import annotations

import json
import os
import statistics
import sys
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import names  # noqa: E402
import report_more  # noqa: E402


def index(rows):
    by = defaultdict(dict)  # op -> round -> row
    for r in rows:
        if r.get("group") not in ("config", "scale", "codec", "shard", "plan") and "round" in r:
            by[r["op"]][r["round"]] = r
    return by


def spread(vals, fmt="{:.0f}"):
    vals = [v for v in vals if v == v]
    if not vals:
        return "n/a"
    m = statistics.median(vals)
    return f"{fmt.format(m)} [{fmt.format(min(vals))}-{fmt.format(max(vals))}]" if len(vals) > 1 else fmt.format(m)


def mbps(by, op):
    return [r["mb_per_s"] for r in by.get(op, {}).values() if "mb_per_s" in r]


def ratios(by, a, b):
    """Per-round a/b of MB/s (same round only)."""
    ra, rb = by.get(a, {}), by.get(b, {})
    return [ra[k]["mb_per_s"] / rb[k]["mb_per_s"] for k in ra if k in rb]


def judged(vals, target, at_least=True):
    if not vals or target is None:
        return ""
    m = statistics.median(vals)
    return " yes" if (m >= target if at_least else m <= target) else " NO"


def limits_table(by, n):
    print("\n## Machine limits (same run; median [min-max] MB/s over rounds)\n")
    print("| limit | MB/s | what it is |\n|---|---|---|")
    for k in sorted({n, 1}, reverse=True):
        s = names.save_rows(k)
        if s["dd_buf"] not in by:  # the 1-writer rows: --full only
            continue
        print(f"| {s['dd_buf']} | {spread(mbps(by, s['dd_buf']))} | dd of ckpt's own shard files (page-cache source), conv=fsync |")
        print(f"| {s['dd_direct']} | {spread(mbps(by, s['dd_direct']))} | the same with oflag=direct: the physical write limit; "
              f"{spread(ratios(by, s['dd_direct'], s['dd_buf']), '{:.2f}')}x buffered |")
    what = {"page cache": "files resident in this VM's page cache",
            "host-cached": "after sync + drop_caches: the hypervisor's cache still serves it (not a disk read)",
            "cold": "a fresh copy written with O_DIRECT and never read: the disk"}
    for cache in names.CACHES:
        op = names.load_rows(n, cache)["dd_read"]
        if op not in by:  # host-cached: --full only
            continue
        print(f"| {op} | {spread(mbps(by, op))} | {what[cache]} |")
    o = names.other_rows(n)
    print(f"| {o['dd_read_1']} | {spread(mbps(by, o['dd_read_1']))} | the read limit of a 1-rank reshard |")
    print(f"| {o['dio_write']} | {spread(mbps(by, o['dio_write']))} | 4 MiB O_DIRECT pwrites from one huge-page "
          f"buffer a writer + fdatasync: no hash, no copy (dd's 4 KiB-page buffer costs a pin per page here) |")
    print(f"| {o['dio_read']} | {spread(mbps(by, o['dio_read']))} | the same files read back with O_DIRECT: the "
          f"read limit of a cold direct load |")
    print(f"| {o['memcpy']} | {spread(mbps(by, o['memcpy']))} | one memcpy of the whole state's byte count |")
    print(f"| {o['sha256']} | {spread(mbps(by, o['sha256']))} | per core; ckpt hashes every chunk on save and load |")


def ratio_cells(by, op, pairs):
    cells = []
    for base, target, at_least in pairs:
        v = ratios(by, op, base)
        mark = "" if target is None else f" (>= {target})" if at_least else f" (<= {target})"
        cells.append(f"{spread(v, '{:.2f}')}x{mark}{judged(v, target, at_least)}" if v else "n/a")
    return " | ".join(cells)


def save_table(by, n):
    print("\n## Save (logical MB/s, median [min-max]; ratios per round, target in brackets)\n")
    print("| row | MB/s | stored MB | vs dd O_DIRECT same writers | vs dd buffered | vs torch.save+fsync | vs h5py+fsync |")
    print("|---|---|---|---|---|---|---|")
    for k in sorted({n, 1}, reverse=True):
        s = names.save_rows(k)
        pairs = [(s["dd_direct"], 0.9, True), (s["dd_buf"], None, True), (s["torch_save"], 1.2, True),
                 (s["h5py_save"], None, True)]
        for key in ("ckpt_raw", "ckpt_raw_buffered", "ckpt_raw_wb", "ckpt_zstd", "torch_save", "h5py_save"):
            op = s[key]
            if op not in by:
                continue
            stored = [r["stored_bytes"] / 1e6 for r in by[op].values() if "stored_bytes" in r]
            prs = pairs if key.startswith("ckpt") else pairs[:2]
            cells = ratio_cells(by, op, prs) + (" | | " if len(prs) == 2 else "")
            print(f"| {op} | {spread(mbps(by, op))} | {spread(stored)} | {cells} |")
        wb = ratios(by, s["ckpt_raw_wb"], s["ckpt_raw_buffered"])
        if wb:
            print(f"| buffered: early writeback 64 MiB on / off, {k} rank(s) | | | {spread(wb, '{:.2f}')}x | | | |")
        di = ratios(by, s["ckpt_raw"], s["ckpt_raw_buffered"])
        if di:
            print(f"| O_DIRECT (default) / buffered (--buffered-io), {k} rank(s) | | | {spread(di, '{:.2f}')}x | | | |")
        lim = ratios(by, s["ckpt_raw"], names.other_rows(n)["dio_write"]) if k == n else []
        if lim:
            print(f"| ckpt save raw (O_DIRECT) / O_DIRECT huge-page writer (no hash), {k} ranks | | | "
                  f"{spread(lim, '{:.2f}')}x | | | |")


def load_table(by, n):
    print("\n## Load (hashes verified; logical MB/s, median [min-max]; ratios per round)\n")
    print("| row | MB/s | vs dd read, same files and cache state | vs dd read O_DIRECT, same files | "
          "vs torch.load, same cache state | vs the same work in C (read+hash+copy), same state |")
    print("|---|---|---|---|---|---|")
    for cache in names.CACHES:
        r = names.load_rows(n, cache)
        if r["ckpt_load"] not in by:  # host-cached: --full only
            continue
        for key in ("ckpt_load", "ckpt_load_xxh3", "ckpt_load_buffered", "ckpt_load_xxh3_buffered"):
            if r[key] in by:
                same_work = r["rv_xxh3" if "xxh3" in key else "rv_sha256"]
                print(f"| {r[key]} | {spread(mbps(by, r[key]))} | "
                      f"{ratio_cells(by, r[key], [(r['dd_read'], 0.9, True), (r['dd_read_direct'], 0.9, True), (r['torch_load'], 1.0, True), (same_work, None, True)])} |")
        for key in ("torch_load", "dd_read_direct", "rv_sha256", "rv_xxh3"):
            if r[key] in by:
                print(f"| {r[key]} | {spread(mbps(by, r[key]))} | "
                      f"{ratio_cells(by, r[key], [(r['dd_read'], None, True)])} | | | |")
    o, r, c = names.other_rows(n), names.load_rows(n, "page cache"), names.load_rows(n, "cold")
    z = o["ckpt_load_zstd"]
    stored = [x["stored_bytes"] / 1e6 for x in by.get(z, {}).values()]
    print(f"| {z} (stored {spread(stored)} MB) | {spread(mbps(by, z))} | "
          f"{ratio_cells(by, z, [(r['dd_read'], None, True)])} (raw files) | | "
          f"{ratio_cells(by, z, [(r['torch_load'], None, True)])} | |")
    print(f"| {o['reshard']} | {spread(mbps(by, o['reshard']))} | "
          f"{ratio_cells(by, o['reshard'], [(o['dd_read_1'], 0.85, True)])} (1 reader) | | | |")
    for key in ("ckpt_load", "ckpt_load_xxh3"):  # cold: auto reads direct
        v = ratios(by, c[key], o["dio_read"])
        if v:
            print(f"| {c[key]} / O_DIRECT huge-page reader (no hash) | | {spread(v, '{:.2f}')}x | | | |")
    print(f"| {o['reshard_cold']} | {spread(mbps(by, o['reshard_cold']))} | "
          f"{ratio_cells(by, o['reshard_cold'], [(c['dd_read'], 0.85, True), (c['dd_read_direct'], 0.85, True)])} "
          f"(both {n} files, {n} readers) | | |")


def main(results, out):
    rows = [json.loads(line) for line in open(results) if line.strip()]
    cfg = next(r for r in rows if r["op"] == "config")
    by, n = index(rows), cfg["ranks"]
    loads = [r["load1"] for r in rows if "load1" in r]
    print(f"# ckpt bench: demo GPT, {cfg['layers']} layers, {n} ranks, {cfg['rounds']} rounds, {cfg['cores']} cores; "
          f"load average during the run {spread(loads, '{:.1f}')}"
          f"{'' if cfg['dropped_caches'] else '; drop_caches NOT allowed: host-cached rows are page-cache reads'}")
    walls = {r["op"]: r["wall_s"] for r in rows if r.get("group") == "config" and "wall_s" in r}
    print(f"{'full run (--full)' if cfg.get('full') else 'default run (make bench BENCH_FLAGS=--full for the full one)'}; "
          "wall " + ", ".join(f"{k.replace('wall ', '')} {v:.0f} s" for k, v in walls.items()))
    limits_table(by, n)
    save_table(by, n)
    load_table(by, n)
    report_more.async_table(by, names.other_rows(n)["async"], spread, judged)
    report_more.scaling_table(rows, spread)
    report_more.extras(rows)
    report_more.caveats()
    report_more.plots(rows, out)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
