#!/usr/bin/env python3
"""`make bench`: ckpt against honest baselines, one machine, one run.

Every row is measured in ROUNDS rounds, the rows of a round in alternation
(the order rotates each round), and reported as median [min-max]; ratios are
taken within a round and reported the same way. Baselines do the same work
where they can: the same bytes (dd copies ckpt's own shard files; torch.save
and h5py save the arrays read from them), the same number of writers (one per
rank), the same durability (fsync of each file). bench/ops.py says what each
cache state of a read is; bench/report.py prints the machine-limits table,
every ckpt figure as a ratio to its limit and its peers, the scaling rows and
the plots (bench/out/*.png), and which baseline cannot do identical work.

  bench/run.py [build-dir] [--full]
  default (`make bench`, a few minutes on 2 cores): ~0.36 GB state (1 layer),
    3 rounds, N ranks only (no 1-rank write rows), reads from the page cache
    and cold (no host-cached rows), scaling 1 round over 1 and 2 layers at N
    ranks and 1 layer at 1 rank, the codec table on 64 MiB. Measured: 324 s at
    load ~7 with host-cached rows, which this default then dropped.
  --full or CKPT_BENCH_FULL=1 (`make bench BENCH_FLAGS=--full`; ~15+ min): the
    1.02 GB demo state, 5 rounds, N and 1-rank write rows (with torch.save/h5py
    peers for both), host-cached reads, sizes up to ~4 GB and 1/2/4 ranks over 3 rounds, the
    shard-write and convert tables.
  env: CKPT_BENCH_ROUNDS, CKPT_BENCH_LAYERS (state = demo GPT with that many
         layers: 1 ~0.36 GB, 2 ~0.45 GB, 8 ~1.02 GB), CKPT_BENCH_RANKS
         (default 2), CKPT_BENCH_DIR (scratch; default <build>/benchdata)
Every baseline still does the same work as the row it is compared with in
both modes; the default only measures fewer rows, smaller, fewer times.
Results: bench/out/results.jsonl (every sample), then the report.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import names  # noqa: E402
import ops  # noqa: E402

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
FULL = "--full" in sys.argv or os.environ.get("CKPT_BENCH_FULL") == "1"
BUILD = os.path.realpath(ARGS[0] if ARGS else "build")
N = int(os.environ.get("CKPT_BENCH_RANKS", "2"))
ROUNDS = int(os.environ.get("CKPT_BENCH_ROUNDS", "5" if FULL else "3"))
LAYERS = int(os.environ.get("CKPT_BENCH_LAYERS", "8" if FULL else "1"))
SIZES = (1, 2, 4, 8, 16, 40) if FULL else (1, 2)
RANK_POINTS = (1, 2, 4) if FULL else (1,)
SCALE_ROUNDS = max(2, ROUNDS - 2) if FULL else 1
WRITE_RANKS = tuple(dict.fromkeys((N, 1))) if FULL else (N,)  # 1-rank write rows only in --full
CACHES = names.CACHES if FULL else ("page cache", "cold")  # host-cached reads only in --full
P = ops.Paths(BUILD, os.environ.get("CKPT_BENCH_DIR", os.path.join(BUILD, "benchdata")))
OUTDIR = os.path.join(HERE, "out")
R = os.path.join(OUTDIR, "results.jsonl")


def model(layers: int) -> str:
    return f"demo:num_layers={layers}"


def emit(row: dict) -> None:
    if "seconds" in row and "bytes" in row:
        row["mb_per_s"] = row["bytes"] / 1e6 / row["seconds"]
    row["load1"] = round(os.getloadavg()[0], 2)
    row.pop("files", None)
    with open(R, "a") as f:
        f.write(json.dumps(row) + "\n")
    rate = f"{row['mb_per_s']:8.0f} MB/s" if "mb_per_s" in row else ""
    print(f"  r{row.get('round', '-')} {row['op']:<58} {rate}  load {row['load1']}", flush=True)


def d(*parts) -> str:
    return os.path.join(P.dir, *parts)


def references() -> dict:
    """The checkpoints whose bytes every baseline reuses (saved once, not timed here)."""
    refs = {"n": d("ref_n"), "1": d("ref_1"), "z": d("ref_z"), "x": d("ref_x")}
    refs["bytes"] = ops.ckpt_save(P, refs["n"], N, model(LAYERS))["bytes"]
    ops.ckpt_save(P, refs["x"], N, model(LAYERS), "--hash", "xxh3-128")
    if 1 in WRITE_RANKS and N != 1:
        ops.ckpt_save(P, refs["1"], 1, model(LAYERS))
    ops.ckpt_save(P, refs["z"], N, model(LAYERS), "--compress", "zstd")
    return refs


def it(root: str) -> str:
    return os.path.join(root, "iter_0000001")


def write_ops(refs: dict) -> list:
    out = []
    for n in WRITE_RANKS:
        ref = refs["n"] if n == N else refs["1"]
        s, src = names.save_rows(n), ops.rank_files(it(ref))
        out += [(s["dd_buf"], lambda src=src: ops.dd_write(src, d("w", "dd"), False)),
                (s["dd_direct"], lambda src=src: ops.dd_write(src, d("w", "dd"), True)),
                (s["ckpt_raw"], lambda n=n: ops.ckpt_save(P, d("w", "ckpt"), n, model(LAYERS))),
                (s["ckpt_raw_buffered"], lambda n=n: ops.ckpt_save(P, d("w", "ckpt"), n, model(LAYERS),
                                                                    "--buffered-io")),
                (s["ckpt_raw_wb"], lambda n=n: ops.ckpt_save(P, d("w", "ckpt"), n, model(LAYERS), "--buffered-io",
                                                              env={"CKPT_WRITEBACK_MIB": "64"}))]
        if n == N or FULL:
            out += [(s["torch_save"], lambda n=n, ref=ref: ops.peer(P, "torch.save", it(ref), d("w", f"torch{n}"))),
                    (s["h5py_save"], lambda n=n, ref=ref: ops.peer(P, "h5py.save", it(ref), d("w", f"h5py{n}")))]
    s = names.save_rows(N)
    out.append((s["ckpt_zstd"], lambda: ops.ckpt_save(P, d("w", "ckpt"), N, model(LAYERS), "--compress", "zstd")))
    return out


def prepared(cache: str, src: str, tag: str) -> str:
    """src as the read will find it: warm in this VM, after drop_caches, or a fresh O_DIRECT copy."""
    if cache == "page cache":
        ops.warm(f for dd, _, fs in os.walk(src) for f in (os.path.join(dd, x) for x in fs))
        return src
    if cache == "host-cached":
        ops.drop_caches()
        return src
    return ops.fresh_copy(src, d("r", tag))


def read_ops(refs: dict) -> list:
    out = []
    torch_dir = d("w", f"torch{N}")
    for cache in CACHES:
        r = names.load_rows(N, cache)
        out += [(r["dd_read"], lambda c=cache: ops.dd_read(ops.rank_files(prepared(c, it(refs["n"]), "dd")), N)),
                (r["ckpt_load"], lambda c=cache: ops.ckpt_load(P, prepared(c, refs["n"], "ckpt"), N, f"tp={N}")),
                (r["ckpt_load_xxh3"], lambda c=cache: ops.ckpt_load(P, prepared(c, refs["x"], "ckpt"), N, f"tp={N}")),
                (r["torch_load"], lambda c=cache: ops.peer(P, "torch.load", prepared(c, torch_dir, "torch")))]
        if cache != "cold":  # a verified load's work without ckpt (buffered reads, as auto does here)
            out += [(r["rv_sha256"], lambda c=cache: ops.readverify(P, "sha256", ops.rank_files(
                        prepared(c, it(refs["n"]), "rv")))),
                    (r["rv_xxh3"], lambda c=cache: ops.readverify(P, "xxh3-128", ops.rank_files(
                        prepared(c, it(refs["x"]), "rv"))))]
        if cache != "page cache":  # there the default (auto) reads buffered: the same read
            out += [(r["dd_read_direct"],
                     lambda c=cache: ops.dd_read(ops.rank_files(prepared(c, it(refs["n"]), "dd")), N, direct=True)),
                    (r["ckpt_load_buffered"],
                     lambda c=cache: ops.ckpt_load(P, prepared(c, refs["n"], "ckpt"), N, f"tp={N}", "--buffered-io")),
                    (r["ckpt_load_xxh3_buffered"],
                     lambda c=cache: ops.ckpt_load(P, prepared(c, refs["x"], "ckpt"), N, f"tp={N}", "--buffered-io"))]
    o = names.other_rows(N)
    out += [(o["ckpt_load_zstd"], lambda: ops.ckpt_load(P, prepared("page cache", refs["z"], ""), N, f"tp={N}")),
            (o["reshard"], lambda: ops.ckpt_load(P, prepared("page cache", refs["n"], ""), 1, "tp=1")),
            (o["reshard_cold"], lambda: ops.ckpt_load(P, prepared("cold", refs["x"], "ckpt"), 1, "tp=1")),
            (o["dd_read_1"], lambda: ops.dd_read(ops.rank_files(prepared("page cache", it(refs["n"]), "")), 1))]
    return out


def limit_rows(rnd: int, state_bytes: int) -> None:
    o = names.other_rows(N)
    for row in ops.bench_rows(P, "memcpy", max(1, state_bytes >> 20)):
        emit({**row, "op": o["memcpy"], "round": rnd, "group": "limit"})
    for row in ops.bench_rows(P, "sha256", 256):
        emit({**row, "op": o["sha256"], "round": rnd, "group": "limit"})
    os.makedirs(d("dio"), exist_ok=True)
    for row in ops.bench_rows(P, "dio", d("dio"), N, state_bytes // N, 1):
        emit({**row, "op": o["dio_write" if row["op"] == "dio write" else "dio_read"], "round": rnd, "group": "limit"})
    for row in ops.bench_rows(P, "async", model(LAYERS), f"tp={N}", d("async"), mpi_ranks=N):
        emit({**row, "op": o["async"], "round": rnd, "group": "async"})
    shutil.rmtree(d("async"), ignore_errors=True)


def rounds(refs: dict) -> None:
    w, r = write_ops(refs), read_ops(refs)
    state_bytes = refs["bytes"]
    for rnd in range(ROUNDS):
        print(f"== round {rnd + 1}/{ROUNDS}")
        # Writes first (torch.load reads this round's torch.save files), each
        # group in an order rotated by one per round.
        for group, lst in (("write", w), ("read", r)):
            k = rnd % len(lst)
            for name, fn in lst[k:] + lst[:k]:
                emit({**fn(), "op": name, "round": rnd, "group": group})
        limit_rows(rnd, state_bytes)


def scaling() -> None:
    """ckpt save vs dd (buffered and O_DIRECT) of the files it just wrote: state size (N ranks), then ranks."""
    print("== scaling: state size and ranks (ckpt save, then dd of its own files)")
    points = [(N, layers) for layers in SIZES] + [(n, LAYERS) for n in RANK_POINTS]
    for rnd in range(SCALE_ROUNDS):
        for n, layers in points:
            root = d("s", "ckpt")
            s = ops.ckpt_save(P, root, n, model(layers))
            tag = {"round": rnd, "group": "scale", "ranks": n, "layers": layers, "state_bytes": s["bytes"]}
            emit({**s, **tag, "op": "scale ckpt save raw"})
            src = ops.rank_files(it(root))
            emit({**ops.dd_write(src, d("s", "dd"), False), **tag, "op": "scale dd write buffered+fsync"})
            emit({**ops.dd_write(src, d("s", "dd"), True), **tag, "op": "scale dd write O_DIRECT+fsync"})
            shutil.rmtree(d("s"), ignore_errors=True)


def extras() -> None:
    print("== chunk codec: zstd settings on bf16 normal(0,0.02), 1 thread")
    for row in ops.bench_rows(P, "codec", 256 if FULL else 64):
        emit({**row, "group": "codec"})
    if FULL:
        print("== pipelined shard write (512 MiB bf16): encode workers 0 / 1 / 2")
        for comp in ("none", "zstd"):
            for t in (0, 1, 2):
                for row in ops.bench_rows(P, "shard", 512, t, comp, P.dir):
                    emit({**row, "group": "shard"})
        print("== ckpt convert (HF safetensors <-> ckpt, torch.save) vs reading its bytes")
        ops.job([ops.PY, os.path.join(HERE, "convert_bench.py"), P.ckpt, d("convert"), R], scratch=P.dir)
    print("== plan simulation (no data)")
    for mdl, src, dst in (("llama70b", "tp=8,pp=16,dp=64", "tp=8,pp=8,dp=128"),
                          ("llama405b", "tp=8,pp=14,dp=146", "tp=8,pp=7,dp=292")):
        tfile = d("time.txt")
        j = json.loads(ops.job(["/usr/bin/time", "-f", "%e %M", "-o", tfile, P.ckpt, "plan", "--simulate", mdl,
                                "--from", src, "--to", dst, "--json"], scratch=P.dir))
        with open(tfile) as f:
            secs, rss_kb = f.read().split()[-2:]
        emit({"op": "plan " + mdl, "group": "plan", "ranks": j["ranks"], "wall_s": float(secs),
              "max_rss_mb": int(rss_kb) / 1024,
              "bytes_read_total": j["bytes_read_total"], "bytes_read_total_share_dp": j["bytes_read_total_share_dp"],
              "checkpoint_bytes": j["checkpoint_bytes"], "from": j["from"], "to": j["to"]})


def timed(section: str, fn):
    """Runs fn; records its wall time (row 'wall <section>', printed by the report)."""
    t = time.monotonic()
    out = fn()
    emit({"op": f"wall {section}", "group": "config", "wall_s": time.monotonic() - t})
    return out


def main() -> int:
    shutil.rmtree(P.dir, ignore_errors=True)
    os.makedirs(P.dir)
    os.makedirs(OUTDIR, exist_ok=True)
    open(R, "w").close()
    t0 = time.monotonic()
    emit({"op": "config", "group": "config", "ranks": N, "rounds": ROUNDS, "layers": LAYERS, "full": FULL,
          "cores": os.cpu_count(), "dropped_caches": ops.drop_caches()})
    refs = timed("references", references)
    timed("rounds", lambda: rounds(refs))
    timed("scaling", scaling)
    timed("extras", extras)
    emit({"op": "bench wall time", "group": "config", "wall_s": time.monotonic() - t0, "full": FULL})
    ops.job([ops.PY, os.path.join(HERE, "report.py"), R, OUTDIR], scratch=P.dir)
    with open(os.path.join(P.dir, ".job.out")) as f:
        print(f.read())
    shutil.rmtree(P.dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
