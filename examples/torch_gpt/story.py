"""Driver-side helpers shared by the demo (demo.py) and the checkpoint tests:
launch the training job as a separate process tree (spawn launcher or
mpirun), SIGKILL it in the middle of a save, and ask ckpt's CLI about the
result (verify, fingerprint, diff, reshard).

Every wait has a timeout; a job is started in its own session so that the
kill reaches every rank (and only them).
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time

from .launch import free_port

EXAMPLES = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(EXAMPLES)
PYTHON = "/usr/bin/python3"
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
          "--mca", "btl", "self,vader"]
TMP_DIR = re.compile(r"^\.iter_(\d+)\.tmp-")


def job_env(build: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (EXAMPLES, env.get("CKPT_PYTHONPATH") or os.path.join(build, "python"),
                    env.get("PYTHONPATH")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def train_cmd(nproc: int, args: list[str], launcher: str = "spawn", timeout_s: float = 300) -> list:
    """The command line of a training job on `nproc` ranks."""
    if launcher == "spawn":
        return [PYTHON, "-m", "torch_gpt.launch", "--nproc", str(nproc), "--timeout",
                str(timeout_s), "--"] + args
    if launcher == "mpirun":
        port = str(free_port())
        return MPIRUN + ["-np", str(nproc), "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS",
                         "-x", f"MASTER_PORT={port}", PYTHON, "-m", "torch_gpt.train"] + args
    raise ValueError(f"unknown launcher '{launcher}' (spawn | mpirun)")


def run(cmd: list, build: str, timeout_s: float = 300, echo: bool = False) -> str:
    """Runs a command to completion; raises with its output when it fails."""
    p = subprocess.run(cmd, env=job_env(build), cwd=REPO, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=timeout_s)
    if echo:
        sys.stdout.write(p.stdout)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-4000:]}")
    return p.stdout


def _in_flight_saves(root: str, min_iteration: int) -> list[tuple[int, str]]:
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    out = []
    for n in names:
        m = TMP_DIR.match(n)
        if m and int(m.group(1)) >= min_iteration:
            out.append((int(m.group(1)), os.path.join(root, n)))
    return out


def _listing(path: str) -> list:
    try:
        return sorted((n, os.path.getsize(os.path.join(path, n))) for n in os.listdir(path))
    except FileNotFoundError:
        return []


def committed_iterations(root: str) -> list[int]:
    its = []
    for n in os.listdir(root) if os.path.isdir(root) else []:
        m = re.match(r"^iter_(\d+)$", n)
        if m:
            its.append(int(m.group(1)))
    return sorted(its)


def run_and_kill_mid_save(cmd: list, build: str, root: str, min_iteration: int,
                          timeout_s: float = 300, log=None) -> dict:
    """Starts the job and SIGKILLs its whole process group as soon as a save of
    an iteration >= min_iteration is in flight (its tmp dir holds a file).
    Returns what was on disk at the kill: the save's iteration and files, and
    the committed iterations. Raises if the job ends before that."""
    out = open(log, "w") if log else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, env=job_env(build), cwd=REPO, stdout=out,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            for it, path in _in_flight_saves(root, min_iteration):
                if _listing(path):
                    os.killpg(proc.pid, signal.SIGKILL)
                    t_kill = time.monotonic()
                    proc.wait(30)
                    return {"killed_in_save_of": it, "tmp_dir": os.path.basename(path),
                            "files_at_kill": _listing(path), "exit_code": proc.returncode,
                            "committed": committed_iterations(root),
                            "wait_s": time.monotonic() - t_kill}
            if proc.poll() is not None:
                raise RuntimeError(f"job ended (exit {proc.returncode}) before a save of "
                                   f"iteration >= {min_iteration} was caught in flight")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no save of iteration >= {min_iteration} within {timeout_s} s")
            time.sleep(0.001)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)
        if log:
            out.close()


def read_jsonl(path: str) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def ckpt_bin(build: str) -> str:
    return os.path.join(build, "cli", "ckpt")


def ckpt_json(build: str, *args, timeout_s: float = 120, ok_codes=(0,)) -> dict:
    """Runs `ckpt <args> --json` and parses its output."""
    p = subprocess.run([ckpt_bin(build), *args, "--json"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout_s)
    if p.returncode not in ok_codes:
        raise RuntimeError(f"ckpt {' '.join(args)} exited {p.returncode}: {p.stderr.strip()}")
    return json.loads(p.stdout)


def tensor_digests(build: str, root: str, iteration: int | None = None) -> dict:
    """{tensor key: (digest, canonical elements)} from `ckpt fingerprint --per-tensor`."""
    args = ["fingerprint", root, "--per-tensor"]
    if iteration is not None:
        args += ["--iter", str(iteration)]
    fp = ckpt_json(build, *args)
    return {t["key"]: (t["digest"], math.prod(t["canonical_shape"])) for t in fp["per_tensor"]}


def compare_digests(a: dict, b: dict) -> dict:
    """Tensors (and their elements) bitwise equal between a and b."""
    keys = sorted(set(a) | set(b))
    same = [k for k in keys if k in a and k in b and a[k][0] == b[k][0]]
    elem = lambda k: a[k][1]
    return {"tensors": len(keys), "tensors_equal": len(same),
            "elements": sum(elem(k) for k in keys if k in a),
            "elements_in_equal_tensors": sum(elem(k) for k in same),
            "differing": [k for k in keys if k not in same]}
