"""The measurements bench/run.py alternates: each function runs one job and
returns one sample {op, bytes (logical), stored_bytes, seconds, ...}.

Same bytes: dd copies ckpt's own shard files (the reference checkpoint's
rank_<r>.h5), the peers save the arrays read from them. Same number of
writers: one dd / one peer process per rank file, all at once. Same
durability: dd conv=fsync, torch.save and h5py fsync each file; ckpt also
fsyncs its directories and renames (dd and the peers do not).

Cache states for reads, named as what they are:
  page cache   the file was just written or read in this VM;
  host-cached  after sync + drop_caches; the hypervisor's cache may still serve it;
  cold         a fresh copy written with O_DIRECT (dd oflag=direct) and never
               read before - neither this VM's nor (as measured) the host's cache holds it.
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

DEADLINE_S = 1800.0
PY = "/usr/bin/python3"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca", "btl", "self,vader"]
os.environ.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


class Paths:
    def __init__(self, build: str, scratch: str):
        self.ckpt = os.path.join(build, "cli", "ckpt")
        self.bench = os.path.join(build, "bench", "ckpt_bench")
        self.dir = scratch


def job(argv, env=None, scratch="/tmp") -> str:
    """Runs argv as a launcher job (deadline enforced); returns its stdout; fails the bench on rc != 0."""
    out = os.path.join(scratch, ".job.out")
    full_env = None if env is None else {**os.environ, **env}
    r = launcher.run_job([str(a) for a in argv], DEADLINE_S, stdout=out, env=full_env)
    with open(out) as f:
        text = f.read()
    if r.rc != 0:
        raise SystemExit(f"bench: {' '.join(map(str, argv))} exited {r.rc}\n{text[-2000:]}")
    return text


def json_lines(text: str) -> list:
    return [json.loads(ln) for ln in text.splitlines() if ln.strip().startswith("{")]


def tree_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def rank_files(iter_dir: str) -> list:
    return sorted(os.path.join(iter_dir, f) for f in os.listdir(iter_dir) if f.startswith("rank_") and f.endswith(".h5"))


def drop_caches() -> bool:
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def warm(files) -> None:
    """Reads files into this VM's page cache (the sources of dd writes must not cost disk reads)."""
    for p in files:
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass


def _all_at_once(argvs) -> float:
    t0 = time.monotonic()
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL) for a in argvs]
    for p in procs:
        if p.wait(timeout=DEADLINE_S) != 0:
            raise SystemExit(f"bench: {' '.join(p.args)} exited {p.returncode}")
    return time.monotonic() - t0


def dd_write(srcs, out_dir: str, direct: bool) -> dict:
    """One dd per source file, all at once: copy + fsync (conv=fsync), O_DIRECT with direct."""
    shutil.rmtree(out_dir, ignore_errors=True)
    os.makedirs(out_dir)
    warm(srcs)
    flags = ["oflag=direct"] if direct else []
    argvs = [["dd", f"if={s}", f"of={os.path.join(out_dir, os.path.basename(s))}", "bs=4M", "conv=fsync",
              "status=none", *flags] for s in srcs]
    n = sum(os.path.getsize(s) for s in srcs)
    return {"bytes": n, "stored_bytes": n, "seconds": _all_at_once(argvs), "writers": len(srcs)}


def dd_read(files, readers: int, direct: bool = False) -> dict:
    """Reads files to /dev/null: one dd per file at once (readers > 1) or all in sequence by one dd;
    iflag=direct with direct (O_DIRECT: no page cache, as ckpt's default load of an uncached file)."""
    n = sum(os.path.getsize(f) for f in files)
    flags = ["iflag=direct"] if direct else []
    if readers > 1:
        secs = _all_at_once([["dd", f"if={f}", "of=/dev/null", "bs=4M", "status=none", *flags] for f in files])
    else:
        t0 = time.monotonic()
        for f in files:
            _all_at_once([["dd", f"if={f}", "of=/dev/null", "bs=4M", "status=none", *flags]])
        secs = time.monotonic() - t0
    return {"bytes": n, "stored_bytes": n, "seconds": secs, "readers": readers}


def fresh_copy(src_dir: str, dst_dir: str) -> str:
    """Copies a directory tree; files >= 1 MiB with dd oflag=direct (never in this VM's page cache)."""
    shutil.rmtree(dst_dir, ignore_errors=True)
    for d, _, fs in os.walk(src_dir):
        rel = os.path.relpath(d, src_dir)
        os.makedirs(os.path.join(dst_dir, rel), exist_ok=True)
        for f in fs:
            s, t = os.path.join(d, f), os.path.join(dst_dir, rel, f)
            if os.path.getsize(s) >= 1 << 20:
                _all_at_once([["dd", f"if={s}", f"of={t}", "bs=4M", "oflag=direct", "conv=fsync", "status=none"]])
            else:
                shutil.copy2(s, t)
    os.sync()
    return dst_dir


def ckpt_save(p: Paths, root: str, ranks: int, model: str, *flags, env=None) -> dict:
    shutil.rmtree(root, ignore_errors=True)
    envx = [x for k, v in (env or {}).items() for x in ("-x", f"{k}={v}")]
    j = json.loads(job(MPIRUN + envx + ["-np", ranks, p.ckpt, "save", "--root", root, "--iter", 1, "--model", model,
                                        "--layout", f"tp={ranks}", "--json", *flags], env=env, scratch=p.dir))
    return {"bytes": j["bytes"], "stored_bytes": tree_bytes(os.path.join(root, "iter_0000001")),
            "seconds": j["seconds"], "writers": ranks}


def ckpt_load(p: Paths, root: str, ranks: int, layout: str, *flags) -> dict:
    """ckpt load --no-check (every chunk's hash is still verified); bytes = logical bytes delivered."""
    j = json.loads(job(MPIRUN + ["-np", ranks, p.ckpt, "load", "--root", root, "--layout", layout, "--json",
                                 "--no-check", *flags], scratch=p.dir))
    per = [r.get("state", -1) for r in j["memory"]["per_rank"]]
    logical = sum(per) if per and min(per) > 0 else j["bytes"]
    return {"bytes": logical, "stored_bytes": j["bytes"], "seconds": j["seconds"], "readers": ranks,
            "bytes_received": j.get("bytes_received", 0)}


def readverify(p: Paths, hash_name: str, files) -> dict:
    """ckpt_bench readverify: a verified load's work on these files in C (buffered reads, a digest of
    every 4 MiB block, a copy into memory of the file's size), one thread per file."""
    j = bench_rows(p, "readverify", hash_name, *files)[-1]
    return {"bytes": j["bytes"], "stored_bytes": j["stored_bytes"], "seconds": j["seconds"], "readers": j["readers"]}


def peer(p: Paths, op: str, *args) -> dict:
    j = json_lines(job([PY, os.path.join(HERE, "peers.py"), op, *args], scratch=p.dir))[-1]
    return {"bytes": j["bytes"], "stored_bytes": j["stored_bytes"], "seconds": j["seconds"], "writers": j["ranks"],
            "files": j["files"]}


def bench_rows(p: Paths, *args, mpi_ranks: int = 0) -> list:
    argv = ([*MPIRUN, "-np", mpi_ranks] if mpi_ranks else []) + [p.bench, *args]
    return json_lines(job(argv, scratch=p.dir))
