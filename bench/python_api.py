#!/usr/bin/env python3
"""Python API bench (issue 14), one run, one machine, same bytes each way:

1. save / load MB/s from Python (ckpt.save / ckpt.load over torch tensors)
   vs the C++ CLI (`ckpt save` / `ckpt load --no-check`, SaveCheckpoint /
   LoadCheckpoint wall time) on the same GPT state: the CLI saves it, Python
   reads every global tensor (ckpt.read_tensor) and saves those tensors with
   the same chunk size; each load reads the CLI's checkpoint. Reps are
   interleaved (CLI, Python, CLI, ...) so machine load hits both alike.
   The binding copies nothing, so the ratio Python/CLI should be >= 0.9.
2. async_save blocking time vs one contiguous memcpy of the same bytes
   (MedianStateMemcpySeconds, the baseline the C++ bench uses; ckpt_lab).
3. control-plane latency per collective: ckpt.MpiComm under mpirun vs
   ckpt.TorchComm (c10d store) under torch.multiprocessing + gloo, and gloo's
   own barrier / all_gather_object for reference.
The timing helpers are the harness module ckpt_lab (harness/lab/py_lab.cc,
built next to the package in build/python, never installed).

  PYTHONPATH=build/python /usr/bin/python3 bench/python_api.py [--build build]
Writes bench/out/python_api.jsonl and prints a summary.
"""
import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def cli_json(ckpt_bin, *args):
    out = subprocess.run([ckpt_bin, *map(str, args), "--json"], capture_output=True, text=True, check=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def io_bench(a, emit):
    import torch
    import ckpt
    import ckpt_lab  # the harness's benchmark module (harness/lab/py_lab.cc), build tree only
    from ckpt import _api
    d = a.dir
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    ckpt_bin = os.path.join(a.build, "cli", "ckpt")
    cli_root, py_root = os.path.join(d, "cli"), os.path.join(d, "py")
    first = cli_json(ckpt_bin, "save", "--root", cli_root, "--iter", 1, "--model", a.model, "--layout", "tp=1",
                     "--chunk-kb", a.chunk_kb)
    m = ckpt.inspect(cli_root)
    tensors = {k: ckpt.read_tensor(cli_root, k) for k in m["tensors"]}
    nbytes = sum(t.numel() * t.element_size() for t in tensors.values())
    assert nbytes == first["bytes"], (nbytes, first["bytes"])
    sd = {k: ckpt.ShardedTensor.from_rank_offsets(k, t, allow_shape_mismatch=m["tensors"][k]["allow_shape_mismatch"])
          for k, t in tensors.items()}
    res = {"cli_save": [], "py_save": [], "cli_load": [], "py_load": []}
    for rep in range(a.reps):
        it = rep + 2
        res["cli_save"].append(cli_json(ckpt_bin, "save", "--root", cli_root, "--iter", it, "--model", a.model,
                                        "--layout", "tp=1", "--chunk-kb", a.chunk_kb)["mb_per_s"])
        t0 = time.perf_counter()
        ckpt.save(sd, py_root, it, metadata=m["metadata"], layout=m["layout"], chunk_bytes=a.chunk_kb * 1024)
        res["py_save"].append(nbytes / 1e6 / (time.perf_counter() - t0))
        res["cli_load"].append(cli_json(ckpt_bin, "load", "--root", cli_root, "--iter", it, "--no-check")["mb_per_s"])
        st = {}
        t0 = time.perf_counter()
        ckpt.load(sd, cli_root, iteration=it, stats=st, strict="none")
        res["py_load"].append(st["bytes_read"] / 1e6 / (time.perf_counter() - t0))
    med = {k: statistics.median(v) for k, v in res.items()}
    for op in ("save", "load"):
        emit({"bench": f"python_api_{op}", "bytes": nbytes, "model": a.model, "reps": a.reps,
              "cli_mb_per_s": med[f"cli_{op}"], "python_mb_per_s": med[f"py_{op}"],
              "ratio_python_vs_cli": med[f"py_{op}"] / med[f"cli_{op}"], "all": {k: res[k] for k in res if op in k}})
    # Async: blocking time of each save vs one memcpy of the same bytes.
    entries = _api._entries(sd, for_load=False)[0]
    blocking = []
    for rep in range(a.reps + 1):
        h = ckpt.async_save(sd, os.path.join(d, "async"), rep + 1, chunk_bytes=a.chunk_kb * 1024)
        blocking.append(h.start_stats["snapshot_seconds"])
        h.wait()
    memcpy = ckpt_lab.memcpy_seconds(entries, 5)
    steady = statistics.median(blocking[1:])
    emit({"bench": "python_api_async", "bytes": nbytes, "first_blocking_seconds": blocking[0],
          "blocking_seconds_median": steady, "memcpy_seconds_median": memcpy,
          "ratio_blocking_vs_memcpy": steady / memcpy, "all": blocking})
    shutil.rmtree(d, ignore_errors=True)


OPS = ["barrier", "gather", "broadcast", "allgather", "alltoall"]


def comm_rows(comm, reps, kind):
    import ckpt  # noqa: F401 (ckpt_lab takes its Comm handles)
    import ckpt_lab
    rows = []
    for op in OPS:
        for size in (8, 65536):
            s = ckpt_lab.comm_bench(comm._handle, op, reps if size == 8 else max(5, reps // 4), size, 60.0)
            rows.append({"bench": "python_api_comm", "comm": kind, "op": op, "bytes": size,
                         "ranks": comm.size, "us_per_call": s * 1e6})
    return rows


def mpi_worker(reps):
    import ckpt
    comm = ckpt.MpiComm()
    rows = comm_rows(comm, reps, "mpi (ckpt.MpiComm)")
    if comm.rank == 0:
        print("ROWS " + json.dumps(rows), flush=True)


def torch_worker(rank, world, port, reps, q):
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist
    import ckpt
    dist.init_process_group("gloo", init_method="env://")
    comm = ckpt.TorchComm()
    rows = comm_rows(comm, reps, "torch.distributed (ckpt.TorchComm, c10d store)")
    for name, fn in (("gloo barrier", lambda: dist.barrier()),
                     ("gloo all_gather_object 8 B", lambda: dist.all_gather_object([None] * world, b"x" * 8))):
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        rows.append({"bench": "python_api_comm", "comm": "torch.distributed gloo (reference)", "op": name,
                     "bytes": 8, "ranks": world, "us_per_call": (time.perf_counter() - t0) / reps * 1e6})
    dist.barrier()
    if rank == 0:
        q.put(rows)


def comm_bench(a, emit):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(a.ranks), sys.executable,
           os.path.abspath(__file__), "--mpi-worker", "--reps", str(a.comm_reps)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, check=True).stdout
    for row in json.loads([l for l in out.splitlines() if l.startswith("ROWS ")][0][5:]):
        emit(row)
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    q = mp.get_context("spawn").SimpleQueue()
    mp.start_processes(torch_worker, args=(a.ranks, port, a.comm_reps, q), nprocs=a.ranks, start_method="spawn")
    for row in q.get():
        emit(row)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default="build")
    p.add_argument("--model", default="tiny:hidden=1024,ffn_hidden=2816,vocab_size=16000,num_layers=4")
    p.add_argument("--chunk-kb", type=int, default=4096)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--comm-reps", type=int, default=200)
    p.add_argument("--dir", default=None)
    p.add_argument("--skip-io", action="store_true")
    p.add_argument("--skip-comm", action="store_true")
    p.add_argument("--mpi-worker", action="store_true")
    a = p.parse_args()
    if a.mpi_worker:
        return mpi_worker(a.comm_reps)
    a.dir = a.dir or os.path.join(a.build, "benchdata", "python_api")
    os.makedirs(os.path.join(HERE, "out"), exist_ok=True)
    out = open(os.path.join(HERE, "out", "python_api.jsonl"), "w")

    def emit(row):
        print(json.dumps(row), flush=True)
        out.write(json.dumps(row) + "\n")

    if not a.skip_io:
        io_bench(a, emit)
    if not a.skip_comm:
        comm_bench(a, emit)


if __name__ == "__main__":
    main()
