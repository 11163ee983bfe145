#!/usr/bin/python3
"""Turns bench/out/results.jsonl (one run) into the ratio table and plots.
Targets (issue 8) are checked against baselines from the same run."""
import json, os, sys

rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
out = sys.argv[2]
by = {r["op"]: r for r in rows}
dd_rows = [r for r in rows if r["op"].startswith("dd write+fsync")]
dd_best = max(dd_rows, key=lambda r: r["mb_per_s"])
dd_w = dd_best["mb_per_s"]
dd_r = by["dd read"]["mb_per_s"]
mem = by["memcpy"]["mb_per_s"]


def mbps(op):
    return by[op]["mb_per_s"] if op in by else float("nan")


print()
print("| measurement | MB/s | ratio | baseline | target | met |")
print("|---|---|---|---|---|---|")
for r in dd_rows:
    print(f"| {r['op']} 1 GiB | {r['mb_per_s']:.0f} | {r['mb_per_s']/dd_w:.2f} | disk write (best = 1.00) | | |")
print(f"| dd read 1 GiB ({'cold' if by['dd read'].get('cold') else 'warm'}) | {dd_r:.0f} | 1.00 | disk read | | |")
print(f"| memcpy 1 GiB | {mem:.0f} | 1.00 | memory | | |")


def line(op, base, base_name, target=None):
    v = mbps(op)
    ratio = v / base
    met = "" if target is None else ("yes" if ratio >= target else "NO")
    t = "" if target is None else f">= {target}x"
    extra = " (cold)" if by.get(op, {}).get("cold") else ""
    print(f"| {op}{extra} | {v:.0f} | {ratio:.2f} | {base_name} | {t} | {met} |")


for op in by:
    if op.startswith("ckpt save"):
        line(op, dd_w, "dd write+fsync", 0.9 if op == "ckpt save raw" else None)
for op in by:
    if op.startswith("ckpt load") and "share" not in op:
        line(op, dd_r, "dd read", 0.85 if "reshard" in op else None)
for op in by:
    if op.startswith("ckpt load") and "share" in op:
        # What the ranks got (read + received from a sharing peer) per second,
        # and what came off the disk.
        r = by[op]
        v = r.get("delivered_mb_per_s", r["mb_per_s"])
        print(f"| {op}: {r['bytes']/1e6:.0f} MB read from disk, {r.get('bytes_received', 0)/1e6:.0f} MB received | {v:.0f} | {v/dd_r:.2f} | dd read (delivered bytes) | >= 0.85x | {'yes' if v/dd_r >= 0.85 else 'NO'} |")
for op in by:
    if op.startswith("ckpt reshard"):
        line(op, dd_w, "dd write+fsync")
for peer, mine in (("torch.save", "ckpt save raw"), ("torch.load", "ckpt load raw"), ("h5py write", "ckpt save raw")):
    if peer in by:
        r = mbps(mine) / mbps(peer)
        met = "yes" if r >= 2 else "NO"
        tgt = ">= 2x" if peer != "h5py write" else ""
        print(f"| {mine} vs {peer} ({mbps(peer):.0f} MB/s) | {mbps(mine):.0f} | {r:.2f} | {peer} | {tgt} | {met if tgt else ''} |")
if "async" in by:
    a = by["async"]
    print(f"| async save blocking {a['blocking_s']*1e3:.1f} ms vs memcpy {a['memcpy_s']*1e3:.1f} ms of {a['rank_bytes']/1e6:.0f} MB | | {a['blocking_over_memcpy']:.2f} | memcpy of the rank's state | <= 1.2x | {'yes' if a['blocking_over_memcpy'] <= 1.2 else 'NO'} |")
    if "memcpy_after_s" in a:
        print(f"| async save blocking vs memcpy after the saves ({a['memcpy_after_s']*1e3:.1f} ms) | | "
              f"{a['blocking_s'] / a['memcpy_after_s']:.2f} | memcpy, page cache holding the saved files | | |")
    print(f"| async: blocking / total save time | | {a['blocking_over_total']:.3f} | total {a['total_s']:.2f} s | | |")
    print(f"| async first save (allocates snapshot buffers) | | | blocking {a['first_run']['blocking_s']:.2f} s | | |")
if "ckpt save zstd" in by and "ckpt save raw" in by:
    pass
for op in by:
    if op.startswith("plan "):
        p = by[op]
        ok = p["seconds"] < 10 and p["max_rss_mb"] < 2048
        print(f"| {op}: {p['ranks']} ranks {p['from']} -> {p['to']} | | | {p['seconds']:.2f} s, {p['max_rss_mb']:.0f} MB RSS | < 10 s, < 2 GB | {'yes' if ok else 'NO'} |")
        if "bytes_read_total_share_dp" in p:
            print(f"| {op}: bytes read, all ranks: {p['bytes_read_total']/1e6:,.0f} MB without sharing, {p['bytes_read_total_share_dp']/1e6:,.0f} MB with --share-reads dp (checkpoint {p['checkpoint_bytes']/1e6:,.0f} MB) | | {p['bytes_read_total']/max(p['bytes_read_total_share_dp'],1):.0f}x less | | | |")
for op in by:
    if op.startswith("convert ") and "vs_read" in by[op]:
        c = by[op]
        base = by.get("convert baseline: read the HF bytes", {}).get("mb_per_s", float("nan"))
        wb = by.get("convert baseline: write+fsync the same bytes", {}).get("mb_per_s", float("nan"))
        print(f"| ckpt {op} ({c['model_mb']:.0f} MB model) | {c['mb_per_s']:.0f} | {c['vs_read']:.2f} | read the same bytes ({base:.0f} MB/s; {c.get('vs_write', float('nan')):.2f}x of write+fsync {wb:.0f} MB/s) | | peak RSS {c['peak_rss_mb']:.0f} MB = {c['rss_vs_model']:.2f} x model |")

codec = [r for r in rows if r["op"] == "codec"]
if codec:
    print()
    print("| zstd setting (shuffle, 1 thread, bf16 normal(0,0.02), 4 MiB chunks) | ratio | encode MB/s | decode MB/s | target >= 1.45x at >= 1000 MB/s |")
    print("|---|---|---|---|---|")
    for r in codec:
        met = "yes" if r["ratio"] >= 1.45 and r["encode_mb_per_s"] >= 1000 else "no"
        name = r["config"]
        print(f"| {name} | {r['ratio']:.3f} | {r['encode_mb_per_s']:.0f} | {r['decode_mb_per_s']:.0f} | {met} |")
shard = [r for r in rows if r["op"] == "shard write"]
if shard:
    print()
    print("| shard write, bf16 normal(0,0.02), fsync incl. | MiB | encode workers | MB/s | peak chunks in flight | peak buffered MB |")
    print("|---|---|---|---|---|---|")
    for r in shard:
        print(f"| {r['compression']} | {r['bytes'] >> 20} | {r['encode_threads']} | {r['mb_per_s']:.0f} | {r['peak_chunks_in_flight']} | {r['peak_buffered_bytes']/1e6:.1f} |")

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(11, 4))
    sr = sorted((r["ranks"], r["mb_per_s"]) for r in rows if r["op"].startswith("scale ranks"))
    ax[0].plot([x for x, _ in sr], [y for _, y in sr], "o-", label="ckpt save (demo state)")
    ax[0].axhline(dd_w, color="gray", ls="--", label="dd write+fsync")
    ax[0].set_xlabel("ranks (TP)"); ax[0].set_ylabel("MB/s"); ax[0].set_title("save throughput vs ranks"); ax[0].legend()
    ss = sorted((r["bytes"] / 1e6, r["mb_per_s"]) for r in rows if r["op"].startswith("scale layers"))
    ax[1].plot([x for x, _ in ss], [y for _, y in ss], "o-", label="ckpt save, 2 ranks")
    ax[1].axhline(dd_w, color="gray", ls="--", label="dd write+fsync")
    ax[1].set_xscale("log"); ax[1].set_xlabel("state size (MB)"); ax[1].set_ylabel("MB/s")
    ax[1].set_title("save throughput vs state size"); ax[1].legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "throughput.png"), dpi=110)
    print(f"\nplot: {os.path.join(out, 'throughput.png')}")
except ImportError:
    print("\n(matplotlib missing: no plot; `make bench` installs python3-matplotlib)")
