"""Shared helpers of the Level 8 scenarios (scripts/scenarios/M1xx.py).

The runner (scripts/harness/scenario_runner.py, behind `ckpt-lab scenario run`)
sets the environment: CKPT (the binary), MPIRUN (prefix before -np), SCRATCH
(empty dir of this scenario), REDUCED (1: CI size), SCENARIO_ID.

Contract of a scenario: everything it measures comes from the commands it runs
in this invocation (each one a job of scripts/harness/launcher.py with a
deadline: every process of a job that overruns is killed); logs go to stderr;
the LAST stdout line is the evidence JSON printed by emit(). A negative
control's shows_failure is computed from what the control measured, never a
constant. A step's stdout is SCRATCH/<name>.out, its stderr SCRATCH/<name>.err,
its exit code SCRATCH/<name>.rc.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "harness"))
import launcher  # noqa: E402

try:
    CKPT = os.environ["CKPT"]
    S = os.environ["SCRATCH"]
    ID = os.environ["SCENARIO_ID"]
    MPIRUN_STR = os.environ["MPIRUN"]
    MPIRUN = shlex.split(MPIRUN_STR)
except KeyError as e:  # pragma: no cover - run by hand
    raise SystemExit(f"run through `ckpt-lab scenario run` ({e} not set)")
REDUCED = os.environ.get("REDUCED", "0") == "1"
PY = sys.executable or "/usr/bin/python3"
STEP_DEADLINE_S = 300.0  # per job; the runner's --timeout-s bounds the whole scenario
T0 = time.monotonic()
# Wall seconds of every step (run_to) in order; emit() records them as "step_seconds" (the runner ignores
# that key) with "python_s", the rest of the scenario's time (its own checks), so a slow scenario shows where.
STEP_S: dict = {}

# The GPT model of a scenario: a ~160 MB bf16 GQA/SwiGLU model at full size
# (16000-token vocab, 4 layers, hidden 1024), the 0.9 MB "tiny" preset under REDUCED.
FULL_MODEL = "demo:num_layers=4,hidden=1024,ffn_hidden=2816,num_heads=16,num_query_groups=8,vocab_size=16000"


def model(extra: str = "") -> str:
    """The --model spec of this size with extra k=v overrides."""
    base = "tiny" if REDUCED else FULL_MODEL
    if not extra:
        return base
    return f"{base},{extra}" if ":" in base else f"{base}:{extra}"


def log(msg: str) -> None:
    print(f"[{ID}] {msg}", file=sys.stderr, flush=True)


def world(layout: str) -> int:
    dims = dict(kv.split("=") for kv in layout.split(",") if "=" in kv)
    n = 1
    for k in ("tp", "pp", "dp", "cp"):
        n *= int(dims.get(k, 1))
    return n


def mpi(layout: str, sub: str, *args, np: int | None = None) -> list:
    """argv of `ckpt SUB --layout LAYOUT ARGS` as a job of world(LAYOUT) ranks."""
    return MPIRUN + ["-np", str(np or world(layout)), CKPT, sub, "--layout", layout, *map(str, args)]


def ck(*args) -> list:
    """argv of a single-process ckpt command."""
    return [CKPT, *map(str, args)]


def path(*parts) -> str:
    return os.path.join(S, *parts)


def run_to(name: str, argv, deadline_s: float = STEP_DEADLINE_S, env=None) -> launcher.JobResult:
    """Runs argv as a job (launcher), stdout to S/name.out, stderr to S/name.err
    (copied to our stderr), exit code to S/name.rc. Never fails: negative
    controls are expected to fail."""
    argv = [str(a) for a in argv]
    log("+ " + " ".join(shlex.quote(a) for a in argv))
    r = launcher.run_job(argv, deadline_s, stdout=path(name + ".out"), stderr=path(name + ".err"), env=env)
    sys.stderr.write(_read(path(name + ".err")))
    STEP_S[name] = round(STEP_S.get(name, 0.0) + r.seconds, 2)
    log(f"step {name}: {r.seconds:.2f} s")
    if r.timed_out:
        log(f"{name}: deadline {deadline_s} s expired, killed {r.killed} processes")
    with open(path(name + ".rc"), "w") as f:
        f.write(f"{r.rc}\n")
    return r


def must(name: str, argv, deadline_s: float = STEP_DEADLINE_S, env=None) -> launcher.JobResult:
    """run_to, but a non-zero exit ends the scenario."""
    r = run_to(name, argv, deadline_s, env)
    if r.rc != 0:
        log(f"FAILED ({r.rc}): {' '.join(map(str, argv))}")
        sys.stderr.write("\n".join(_read(path(name + ".err")).splitlines()[-20:]) + "\n")
        sys.exit(1)
    return r


def _read(p: str) -> str:
    try:
        with open(p, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def J(name: str):
    """S/name.out as one JSON document, else its last JSON line."""
    text = _read(path(name + ".out"))
    try:
        return json.loads(text)
    except ValueError:
        pass
    lines = [ln for ln in text.splitlines() if ln.strip().startswith(("{", "["))]
    if not lines:
        raise SystemExit(f"{ID}: no JSON output from step '{name}'; stderr: {TXT(name)[-800:]}")
    return json.loads(lines[-1])


def RC(name: str) -> int:
    return int(_read(path(name + ".rc")).strip() or "-1")


def TXT(name: str) -> str:
    """stdout + stderr text of a step."""
    return _read(path(name + ".out")) + _read(path(name + ".err"))


def write_json(name: str, obj) -> None:
    """Records a measurement made here (e.g. a wall time) as step output S/name.out."""
    with open(path(name + ".out"), "w") as f:
        json.dump(obj, f)


now = time.monotonic


def emit(title, setup, numbers, checks, claim, nc_what, nc_numbers, nc_shows_failure, headline=None,
         nc_headline=None, gaps=(), headline_en=None, nc_headline_en=None):
    """Prints the evidence object (format: scripts/harness/scenario_runner.py).
    verdict is PASS iff every check is true; gaps: measured shortfalls that are
    reported, not judged. headline/nc_headline (Chinese) and headline_en /
    nc_headline_en (English) cite measured values as {name} or {nc.name}."""
    checks = [{"name": n, "ok": bool(ok)} for n, ok in checks]
    ev = {"id": ID, "title": title, "setup": setup, "numbers": numbers,
          "verdict": "PASS" if all(c["ok"] for c in checks) else "FAIL", "checks": checks, "claim": claim,
          "negative_control": {"what": nc_what, "numbers": nc_numbers, "shows_failure": bool(nc_shows_failure)},
          "reduced": REDUCED}
    for k, v in (("headline", headline), ("headline_en", headline_en)):
        if v:
            ev[k] = v
    for k, v in (("headline", nc_headline), ("headline_en", nc_headline_en)):
        if v:
            ev["negative_control"][k] = v
    gaps = [g for g in gaps if g]
    if gaps:
        ev["gaps"] = gaps
    ev["step_seconds"] = dict(STEP_S, python_s=round(time.monotonic() - T0 - sum(STEP_S.values()), 2))
    for c in checks:
        if not c["ok"]:
            print(f"[{ID}] check failed: {c['name']}", file=sys.stderr)
    print(json.dumps(ev, ensure_ascii=False), flush=True)


__all__ = ["CKPT", "S", "ID", "REDUCED", "PY", "MPIRUN", "MPIRUN_STR", "model", "log", "world", "mpi", "ck", "path", "run_to",
           "must", "J", "RC", "TXT", "write_json", "now", "emit", "json", "os", "re", "sys"]
