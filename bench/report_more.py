"""bench/report.py's second half: async, scaling, codec/shard/convert/plan
tables, what each baseline cannot do identically, and the plots."""
from __future__ import annotations

import os
import statistics
from collections import defaultdict


def async_table(by, op, spread, judged):
    runs = list(by.get(op, {}).values())
    if not runs:
        return
    ms = lambda k: [r[k] * 1e3 for r in runs if k in r]  # noqa: E731
    ratio = lambda a, b: [r[a] / r[b] for r in runs if r.get(b)]  # noqa: E731
    print("\n## Async save (the worst rank; steady = median of saves 2.. of a round, each beside a memcpy "
          "of the same bytes taken in alternation with the saves)\n")
    print("| row | median [min-max] over rounds | target |\n|---|---|---|")
    print(f"| state bytes per rank | {runs[0]['rank_bytes'] / 1e6:.0f} MB | |")
    print(f"| blocking time, steady | {spread(ms('blocking_s'), '{:.1f}')} ms | |")
    print(f"| memcpy contiguous, same bytes, same moment, all ranks at once | "
          f"{spread(ms('memcpy_contig_s'), '{:.1f}')} ms | |")
    print(f"| memcpy contiguous, back to back (hot; not the same conditions) | "
          f"{spread(ms('memcpy_hot_s'), '{:.1f}')} ms | |")
    contig = ratio("blocking_s", "memcpy_contig_s")
    print(f"| blocking / same-moment memcpy | {spread(contig, '{:.2f}')}x | <= 1.2{judged(contig, 1.2, False)} |")
    first = ratio("reserved_first_blocking_s", "blocking_s")
    print(f"| first save, arena reserved at start / steady (median of the trials of a round) | "
          f"{spread(first, '{:.2f}')}x | <= 2{judged(first, 2.0, False)} |")
    print(f"| first save, arena reserved / memcpy into memory mapped with it, same moment | "
          f"{spread(ratio('reserved_first_blocking_s', 'reserved_memcpy_s'), '{:.2f}')}x | |")
    print(f"| first save without Reserve / steady | {spread(ratio('first_blocking_s', 'blocking_s'), '{:.1f}')}x | |")
    print(f"| first save without Reserve / memcpy into fresh memory (first touch) | "
          f"{spread(ratio('first_blocking_s', 'first_touch_memcpy_s'), '{:.2f}')}x | |")


def _linear_fit(points):
    """Least squares seconds = a + b * bytes over (bytes, seconds)."""
    n = len(points)
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else 0.0
    return my - b * mx, b


def _config(rows):
    return next(r for r in rows if r["op"] == "config")


def scale_points(rows):
    """(ranks, layers) -> op -> list of rows."""
    pts = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.get("group") == "scale":
            pts[(r["ranks"], r["layers"])][r["op"]].append(r)
    return pts


def scaling_table(rows, spread):
    pts = scale_points(rows)
    if not pts:
        return
    print("\n## Scaling (save raw; ckpt, then dd of the files it just wrote, same writers; median [min-max] MB/s)\n")
    print("| ranks | state MB | ckpt save | dd buffered+fsync | dd O_DIRECT+fsync | ckpt / O_DIRECT |")
    print("|---|---|---|---|---|---|")
    for (n, layers) in sorted(pts, key=lambda k: (k[0], k[1])):
        p = pts[(n, layers)]
        ck, buf, dio = (p["scale ckpt save raw"], p["scale dd write buffered+fsync"], p["scale dd write O_DIRECT+fsync"])
        by_round = {r["round"]: r["mb_per_s"] for r in dio}
        rat = [r["mb_per_s"] / by_round[r["round"]] for r in ck if r["round"] in by_round]
        print(f"| {n} | {ck[0]['bytes'] / 1e6:.0f} | {spread([r['mb_per_s'] for r in ck])} | "
              f"{spread([r['mb_per_s'] for r in buf])} | {spread([r['mb_per_s'] for r in dio])} | "
              f"{spread(rat, '{:.2f}')}x |")
    ranks = _config(rows)["ranks"]
    series = sorted((pts[k]["scale ckpt save raw"][0]["bytes"],
                     statistics.median(r["seconds"] for r in pts[k]["scale ckpt save raw"])) for k in pts if k[0] == ranks)
    if len(series) >= 3:
        a, b = _linear_fit(series[:-1])
        x, y = series[-1]
        print(f"\nLargest state ({x / 1e6:.0f} MB, {ranks} ranks): {y:.2f} s against {a + b * x:.2f} s predicted by the "
              f"linear fit of the smaller sizes = {y / (a + b * x):.2f}x (target <= 1.1)")


def extras(rows):
    codec = [r for r in rows if r["op"] == "codec"]
    if codec:
        print("\n| zstd setting (shuffle, 1 thread, bf16 normal(0,0.02), 4 MiB chunks) | ratio | encode MB/s | decode MB/s |")
        print("|---|---|---|---|")
        for r in codec:
            print(f"| {r['config']} | {r['ratio']:.3f} | {r['encode_mb_per_s']:.0f} | {r['decode_mb_per_s']:.0f} |")
    shard = [r for r in rows if r["op"] == "shard write"]
    if shard:
        print("\n| shard write, bf16, fsync incl. | MiB | encode workers | MB/s | peak chunks in flight |")
        print("|---|---|---|---|---|")
        for r in shard:
            print(f"| {r['compression']} | {r['bytes'] >> 20} | {r['encode_threads']} | {r['mb_per_s']:.0f} | "
                  f"{r['peak_chunks_in_flight']} |")
    for r in rows:
        if r["op"].startswith("convert ") and "vs_read" in r:
            print(f"| ckpt {r['op']} ({r['model_mb']:.0f} MB model) | {r['mb_per_s']:.0f} MB/s | {r['vs_read']:.2f}x "
                  f"read of the same bytes | peak RSS {r['rss_vs_model']:.2f} x model |")
        if r["op"].startswith("plan "):
            print(f"| {r['op']}: {r['ranks']} ranks {r['from']} -> {r['to']} | {r['wall_s']:.2f} s, "
                  f"{r['max_rss_mb']:.0f} MB RSS | bytes read {r['bytes_read_total'] / 1e6:,.0f} MB without sharing, "
                  f"{r['bytes_read_total_share_dp'] / 1e6:,.0f} MB with --share-reads dp |")


CAVEATS = """
## What the baselines cannot do identically
- dd (write): copies ckpt's finished files: no SHA-256, no HDF5 layout, no manifest, no
  directory fsyncs or renames (ckpt's commit protocol); it reads its source from the page
  cache. It is the limit for the same bytes, writers and data durability, not the same work.
- dd O_DIRECT: bypasses the page cache, as ckpt's default saves do (and its default loads of
  files not in the page cache: "auto"); the --buffered-io rows go through it. dd's buffer has 4 KiB pages and a direct IO pins every page (costly
  on this VM), so the huge-page direct-IO rows (ckpt_bench dio: no hash, no copy) are the
  machine's direct limit (DESIGN "Huge-page chunk buffers").
- torch.save+fsync: one pickle/zip per rank, no per-chunk hashes, no commit protocol, no
  resharding metadata; fsync of the file only (no directory fsync).
- torch.load: verifies nothing (ckpt checks every chunk's hash: SHA-256, or XXH3-128 in
  those rows) and cannot reshard; it returns CPU tensors of the saved layout.
- h5py+fsync: contiguous datasets, no hashes, no manifest, no commit; fsync of the file only.
- async memcpy baseline: one contiguous copy of the rank's state bytes into a buffer of the
  snapshot's kind of memory, taken in alternation with the saves (on this VM a copy into
  memory idle for a second runs several times slower than a back-to-back one; the
  back-to-back "hot" figure is printed beside it); the snapshot copies tensor by tensor
  (merged where contiguous) from the state's own buffers.
- dd (read): copies each file into one reused 4 MiB buffer: no hash, and the bytes never
  reach the state's memory. "read+hash+copy (C, no ckpt)" (ckpt_bench readverify) does a
  verified load's work on the same files - buffered 4 MiB reads, one digest per 4 MiB block
  with ckpt's own hasher, a copy into memory of the file's size written just before - with
  no HDF5, manifest, plan or collectives: the limit of a verified load on these cores.
- the first save after Reserve is the median of several reserving savers (one sample of a
  copy after idle varies 3-5x here); the steady row is the median of a round's saves.
- host-cached reads are served by the hypervisor's cache, not the disk; only "cold" rows
  (fresh files written with O_DIRECT, never read) read the disk.
"""


def caveats():
    print(CAVEATS)


def plots(rows, out):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib missing: no plot; `make bench` installs python3-matplotlib)")
        return
    pts, cfg = scale_points(rows), _config(rows)
    ranks, layers = cfg["ranks"], cfg["layers"]
    fig, ax = plt.subplots(1, 2, figsize=(12, 4.5))
    for op, style in (("scale ckpt save raw", "o-"), ("scale dd write buffered+fsync", "s--"),
                      ("scale dd write O_DIRECT+fsync", "^--")):
        for i, (sel, xf) in enumerate(((lambda k: k[0] == ranks, lambda r: r["bytes"] / 1e6),
                                       (lambda k: k[1] == layers, lambda r: r["ranks"]))):
            xs, ys, lo, hi = [], [], [], []
            for k in sorted(pts, key=lambda k: (k[0], k[1])):
                rs = pts[k][op]
                if not sel(k) or not rs:
                    continue
                v = [r["mb_per_s"] for r in rs]
                xs.append(xf(rs[0])), ys.append(statistics.median(v))
                lo.append(ys[-1] - min(v)), hi.append(max(v) - ys[-1])
            ax[i].errorbar(xs, ys, yerr=[lo, hi], fmt=style, capsize=3, label=op.replace("scale ", ""))
    ax[0].set_xscale("log"), ax[0].set_xlabel("state size (MB, logical)"), ax[0].set_ylabel("MB/s")
    ax[0].set_title(f"save throughput vs state size ({ranks} ranks)")
    ax[1].set_xticks(sorted({k[0] for k in pts})), ax[1].set_xlabel("ranks = writers"), ax[1].set_ylabel("MB/s"), ax[1].set_title("save throughput vs ranks")
    for a in ax:
        a.legend(fontsize=8), a.grid(alpha=0.3)
    fig.tight_layout()
    path = os.path.join(out, "throughput.png")
    fig.savefig(path, dpi=110)
    print(f"plot: {path} (median, bars = min-max over rounds)")
