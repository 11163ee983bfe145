#!/usr/bin/env python3
"""One command, one run, one machine: the disk and memory limits (dd with
fsync, cold dd read, memcpy), the chunk codec table (zstd settings: ratio,
encode/decode MB/s) and pipelined shard writes (encode workers 0/1/2), ckpt
save (default workers and serial)/load/reshard raw and compressed, async-save
blocking time, peers (torch.save/torch.load per rank, h5py) on the same arrays,
scaling over ranks and state size, ckpt convert (each direction vs reading the
same bytes, peak RSS vs model size), and the 70B/405B plan simulation. Prints
a table of MB/s and ratios and writes bench/out/*.png.

  bench/run.py [build-dir]     (CKPT_BENCH_DIR: scratch, default <build>/benchdata;
                                CKPT_BENCH_RANKS: ranks, default 2)

Every job runs through scripts/harness/launcher.py with a deadline (every
process of a job that overruns is killed). Results: bench/out/results.jsonl.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "scripts", "harness"))
import launcher  # noqa: E402

BUILD = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else "build")
CKPT, BENCH = os.path.join(BUILD, "cli", "ckpt"), os.path.join(BUILD, "bench", "ckpt_bench")
DIR = os.environ.get("CKPT_BENCH_DIR", os.path.join(BUILD, "benchdata"))
OUTDIR = os.path.join(HERE, "out")
RANKS = int(os.environ.get("CKPT_BENCH_RANKS", "2"))
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]
PY = "/usr/bin/python3"
DEADLINE_S = 1800.0
os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
R = os.path.join(OUTDIR, "results.jsonl")


def emit(row: dict) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    with open(R, "a") as f:
        f.write(line + "\n")


def job(argv, capture=True) -> str:
    """Runs argv as a launcher job; returns its stdout (fails the bench on a non-zero exit)."""
    out = os.path.join(DIR, ".job.out")
    r = launcher.run_job([str(a) for a in argv], DEADLINE_S, stdout=out if capture else None)
    if r.rc != 0:
        raise SystemExit(f"bench: {' '.join(map(str, argv))} exited {r.rc}")
    if not capture:
        return ""
    with open(out) as f:
        return f.read()


def json_lines(text: str) -> list:
    return [json.loads(ln) for ln in text.splitlines() if ln.strip().startswith("{")]


def cold() -> bool:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def rate(op: str, nbytes: int, seconds: float, **extra) -> None:
    emit({"op": op, "bytes": nbytes, "seconds": seconds, "mb_per_s": nbytes / 1e6 / seconds, **extra})


def timed(argv) -> float:
    t0 = time.monotonic()
    job(argv, capture=False)
    return time.monotonic() - t0


def baselines() -> None:
    print("== baselines")
    dd = os.path.join(DIR, "dd.bin")
    rate("dd write+fsync, 1 writer", 1 << 30,
         timed(["dd", "if=/dev/zero", f"of={dd}", "bs=4M", "count=256", "conv=fsync", "status=none"]))
    n = 256 // RANKS
    t0 = time.monotonic()
    procs = [subprocess.Popen(["dd", "if=/dev/zero", f"of={DIR}/dd{i}.bin", "bs=4M", f"count={n}", "conv=fsync",
                               "status=none"]) for i in range(RANKS)]
    for p in procs:
        p.wait(timeout=DEADLINE_S)
    rate(f"dd write+fsync, {RANKS} writers", n * RANKS * 4194304, time.monotonic() - t0)
    for i in range(RANKS):
        os.remove(f"{DIR}/dd{i}.bin")
    c = cold()
    rate("dd read", 1 << 30, timed(["dd", f"if={dd}", "of=/dev/null", "bs=4M", "status=none"]), cold=c)
    os.remove(dd)
    for row in json_lines(job([BENCH, "memcpy", 1024])):
        emit(row)
    print("== chunk codec: zstd settings on bf16 normal(0,0.02), 1 thread (table on stderr)")
    for row in json_lines(job([BENCH, "codec", 256])):
        emit(row)
    print("== pipelined shard write (512 MiB bf16): encode workers 0 (serial) / 1 / 2")
    for comp in ("none", "zstd"):
        for t in (0, 1, 2):
            for row in json_lines(job([BENCH, "shard", 512, t, comp, DIR])):
                emit(row)
    for name in os.listdir(DIR):
        if name.startswith("shard_") and name.endswith(".h5"):
            os.remove(os.path.join(DIR, name))


def run_save(name, np_, layout, model, *flags) -> None:
    j = json.loads(job(MPIRUN + ["-np", np_, CKPT, "save", "--root", os.path.join(DIR, name), "--iter", 1, "--model",
                                 model, "--layout", layout, "--json", *flags]))
    emit({**j, "op": name})


def run_load(name, root, np_, layout, *flags) -> None:
    c = cold()
    j = json.loads(job(MPIRUN + ["-np", np_, CKPT, "load", "--root", root, "--layout", layout, "--json", "--no-check",
                                 *flags]))
    emit({**j, "op": name, "cold": c})


def ckpt_runs() -> None:
    print(f"== ckpt on the demo state (~1 GB bf16) at TP{RANKS}")
    tp = f"tp={RANKS}"
    raw = os.path.join(DIR, "ckpt save raw")
    run_save("ckpt save raw", RANKS, tp, "demo")
    run_save("ckpt save zstd", RANKS, tp, "demo", "--compress", "zstd")
    run_save("ckpt save raw serial", RANKS, tp, "demo", "--encode-threads", 0)
    run_save("ckpt save zstd serial", RANKS, tp, "demo", "--compress", "zstd", "--encode-threads", 0)
    run_load("ckpt load raw", raw, RANKS, tp)
    run_load("ckpt load zstd", os.path.join(DIR, "ckpt save zstd"), RANKS, tp)
    run_load(f"ckpt load+reshard TP{RANKS}->TP1", raw, 1, "tp=1")
    # DP replicas: every rank needs the whole model; read sharing reads it once.
    run_load(f"ckpt load+reshard TP{RANKS}->DP{RANKS} share none", raw, RANKS, f"dp={RANKS}", "--share-reads", "none")
    run_load(f"ckpt load+reshard TP{RANKS}->DP{RANKS} share dp", raw, RANKS, f"dp={RANKS}", "--share-reads", "dp")
    out = os.path.join(DIR, "resharded")
    s = timed([CKPT, "reshard", raw, out, "--to", "tp=1"])
    size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(out) for f in fs)
    rate(f"ckpt reshard offline TP{RANKS}->TP1", size, s)
    print("== async save (blocking part vs memcpy of the rank's state)")
    for row in json_lines(job(MPIRUN + ["-np", RANKS, BENCH, "async", "demo", tp, os.path.join(DIR, "async")])):
        emit(row)
    print("== peers on the same arrays")
    job([PY, os.path.join(HERE, "peers.py"), os.path.join(raw, "iter_0000001"), os.path.join(DIR, "peers"), R],
        capture=False)
    print("== scaling: ranks and state size")
    for np_ in (1, 2, 4):
        run_save(f"scale ranks {np_}", np_, f"tp={np_}", "demo")
        shutil.rmtree(os.path.join(DIR, f"scale ranks {np_}"), ignore_errors=True)
    for layers in (1, 2, 4, 8):
        run_save(f"scale layers {layers}", 2, "tp=2", f"demo:num_layers={layers}")
        shutil.rmtree(os.path.join(DIR, f"scale layers {layers}"), ignore_errors=True)


def plan_simulation() -> None:
    print("== plan simulation (no data)")
    for model, src, dst in (("llama70b", "tp=8,pp=16,dp=64", "tp=8,pp=8,dp=128"),
                            ("llama405b", "tp=8,pp=14,dp=146", "tp=8,pp=7,dp=292")):
        out, tfile = os.path.join(DIR, "plan.json"), os.path.join(DIR, "time.txt")
        r = launcher.run_job(["/usr/bin/time", "-f", "%e %M", "-o", tfile, CKPT, "plan", "--simulate", model, "--from",
                              src, "--to", dst, "--json"], DEADLINE_S, stdout=out)
        if r.rc != 0:
            continue
        with open(out) as f:
            j = json.load(f)
        with open(tfile) as f:
            seconds, rss_kb = f.read().split()[-2:]
        emit({"op": "plan " + model, "ranks": j["ranks"], "seconds": float(seconds),
              "max_rss_mb": int(rss_kb) / 1024, "bytes_read_total": j["bytes_read_total"],
              "bytes_read_total_share_dp": j["bytes_read_total_share_dp"], "checkpoint_bytes": j["checkpoint_bytes"],
              "from": j["from"], "to": j["to"]})


def main() -> int:
    shutil.rmtree(DIR, ignore_errors=True)
    os.makedirs(DIR)
    os.makedirs(OUTDIR, exist_ok=True)
    open(R, "w").close()
    baselines()
    ckpt_runs()
    print("== ckpt convert (HF safetensors <-> ckpt, torch.save) on a ~1 GB model vs reading its bytes")
    job([PY, os.path.join(HERE, "convert_bench.py"), CKPT, os.path.join(DIR, "convert"), R], capture=False)
    plan_simulation()
    job([PY, os.path.join(HERE, "report.py"), R, OUTDIR], capture=False)
    shutil.rmtree(DIR, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
