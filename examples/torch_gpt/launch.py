"""Spawn launcher: python3 -m torch_gpt.launch --nproc N [--port P] [--timeout S] -- <train args>

Starts N worker processes with torch.multiprocessing (Debian's torchrun does not
start on Python 3.11), sets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR /
MASTER_PORT in each like torchrun, and runs torch_gpt.train.main(<train args>).
spawn() is also the library entry used by tests: it runs any picklable
function on N ranks with a wall-clock deadline, and ends the workers (by their
process ids) when the deadline passes or one of them fails.
"""
from __future__ import annotations

import argparse
import os
import socket
import sys
import time

import torch.multiprocessing as mp

MAX_PROCS = 4  # the shared 2-core machine: never more ranks than this


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(local_rank: int, fn, nproc: int, port: int, args: tuple) -> None:
    os.environ.update(RANK=str(local_rank), WORLD_SIZE=str(nproc), LOCAL_RANK=str(local_rank),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    fn(*args)


def spawn(fn, nproc: int, args: tuple = (), timeout_s: float = 120.0, port: int | None = None):
    """Runs fn(*args) on `nproc` ranks; raises on a worker failure or timeout."""
    if not 1 <= nproc <= MAX_PROCS:
        raise ValueError(f"nproc={nproc} outside [1, {MAX_PROCS}]")
    port = port or free_port()
    ctx = mp.start_processes(_entry, args=(fn, nproc, port, args), nprocs=nproc, join=False,
                             start_method="spawn")
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=0.5):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{nproc} workers did not finish within {timeout_s:.0f} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
                p.join(5)


def _train(argv: list[str]) -> None:
    from .train import main
    main(argv)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--" in argv:
        cut = argv.index("--")
        own, train_args = argv[:cut], argv[cut + 1:]
    else:
        own, train_args = argv, []
    ap = argparse.ArgumentParser(prog="python3 -m torch_gpt.launch")
    ap.add_argument("--nproc", type=int, required=True)
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--timeout", type=float, default=600.0, help="wall-clock limit, seconds")
    a = ap.parse_args(own)
    spawn(_train, a.nproc, (train_args,), timeout_s=a.timeout, port=a.port)


if __name__ == "__main__":
    main()
