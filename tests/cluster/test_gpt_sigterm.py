"""The PyTorch GPT job under mpirun (ckpt.MpiComm) loses node n2 mid-save and is SIGTERMed
(issue 31; ckpt/mpi/launcher_term.h): every survivor still names the lost rank(s) and host n2.

2 nodes x 2 ranks, TP2 x DP2, sync saves every 2 iterations, --ckpt-timeout 3. Rank 2 (on n2)
holds in its save of iteration 2 (--hold-before-save) while the other ranks wait in ckpt's save;
n2 is SIGKILLed whole and, 1 s later, the survivors on n1 are SIGTERMed as mpirun's daemon does
when it learns of a lost node (measured 1.5-1.9 s after a kill in some runs; not in others).
Each survivor must print the CkptTimeoutError naming rank 2 on host 'n2' (missing_ranks /
missing_hosts) and then end by SIGTERM (143) within the deadline + 5 s. Before: the SIGTERM ended
them at once, naming nothing.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
sys.path.insert(0, str(REPO / "scripts"))
import cluster as cluster_mod  # noqa: E402
from torch_gpt import story  # noqa: E402

BUILD = os.environ.get("CKPT_BUILD_DIR") or str(REPO / "build")
DEADLINE_S = 3.0
BOUND_S = DEADLINE_S * 1.25 + 5  # a decision wait (rank 1 waits for rank 0's outcome), then the exit
JOB = [story.PYTHON, "-m", "torch_gpt.train", "--model", "tiny", "--tp", "2", "--micro-batch", "2",
       "--global-batch", "8", "--steps", "4", "--save-interval", "2", "--ckpt-comm", "mpi",
       "--ckpt-timeout", str(DEADLINE_S), "--hold-before-save", "2:60"]


def _text(p: Path) -> str:
    with contextlib.suppress(OSError):
        return p.read_text(errors="replace")
    return ""


wait_for = cluster_mod.wait_for


def job_pids(c, node: str) -> list[int]:
    """The GPT job's processes on `node` (what mpirun's daemon there would signal)."""
    # not the wrapping shell: it traps SIGTERM to record the rank's exit status
    return c.processes(node, lambda argv: b"torch_gpt.train" in argv and not argv[0].endswith(b"bash"))


def test_gpt_survivors_name_lost_host_despite_sigterm(make_cluster, tmp_path):
    c = make_cluster(2)
    out = tmp_path / "out"
    out.mkdir()
    env = story.job_env(BUILD)
    env.update(MASTER_ADDR=c.addr("n1"), MASTER_PORT="29671", OUT=str(out), OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    # trap: this shell outlives mpirun's SIGTERM to record the rank's exit status
    wrap = ('trap : TERM; "$0" "$@" 2>"$OUT/err.$OMPI_COMM_WORLD_RANK"; '
            'echo $? >"$OUT/rc.$OMPI_COMM_WORLD_RANK"')
    argv = c.mpirun_argv({"n1": 2, "n2": 2}) + [
        "-np", "4", "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "-x", "MASTER_ADDR", "-x", "MASTER_PORT",
        "-x", "OUT", "bash", "-c", wrap] + JOB + ["--save", str(tmp_path / "ckpt")]
    with open(tmp_path / "job.out", "w") as log:
        p = c.popen("head", argv, env=env, cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT)
    try:
        held = wait_for(lambda: "holding" in _text(out / "err.2") or p.poll() is not None, 120)
        assert held and p.poll() is None, _text(tmp_path / "job.out")[-3000:] + _text(out / "err.0")[-2000:]
        time.sleep(0.5)  # the others are in ckpt's plan wait for rank 2
        t0 = time.monotonic()
        c.kill("n2")
        time.sleep(1.0)
        termed = job_pids(c, "n1")
        for pid in termed:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        exited = wait_for(lambda: all(_text(out / f"rc.{r}").strip() for r in (0, 1)), BOUND_S + 10)
        secs = time.monotonic() - t0
    finally:
        p.kill()
        p.wait(timeout=30)
    errs = {r: _text(out / f"err.{r}") for r in (0, 1)}
    rcs = {r: _text(out / f"rc.{r}").strip() for r in (0, 1)}
    print(f"GPT job (mpirun, MpiComm) on n1:2,n2:2, n2 killed in the save of iteration 2 and the "
          f"{len(termed)} survivors SIGTERMed 1 s later: exited {secs:.2f} s after the kill "
          f"(deadline {DEADLINE_S} s), statuses {rcs}")
    assert len(termed) >= 2, f"SIGTERMed {len(termed)} survivors: {termed}"
    assert exited and secs <= BOUND_S, (secs, rcs, errs)
    for r in (0, 1):  # printed by ckpt after the deferred SIGTERM (or, where the process had a
        # handler of its own - seen in ~1 of 8 runs, from something the job loads - by Python)
        assert "CkptTimeoutError" in errs[r] and "rank(s) 2" in errs[r] and "on host 'n2'" in errs[r], (r, errs[r])
        assert rcs[r] == "143", (r, rcs, errs[r])
