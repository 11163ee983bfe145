#!/usr/bin/env python3
"""SIGTERM is deferred only while a save/load is under way (ckpt/mpi/launcher_term.h):
  launcher_term.py <ckpt|ckpt-lab> <scratch> <case> [--mpirun "mpirun ..."]
Cases (2 ranks under mpirun, one local host):
  between_saves  `ckpt train --layout dp=2 --save-every 4` (deadline 5 s); once it logged
                 iteration 6, SIGTERM to rank 1: rank 1 ends at once by the signal (before: it
                 trained on for 2 x deadline + 1 s = 11 s, then exited 143).
  during_save    `ckpt-lab save` whose rank 1 sleeps in the vote (deadline 2 s); SIGTERM to rank 0
                 while it waits for that vote: rank 0 still ends by its deadline, naming rank 1,
                 its host and phase 'vote' (exit 2, its own code), not at the signal.
  python         Python ckpt.MpiComm: rank 1 sleeps outside ckpt, rank 0 waits in a ckpt.save
                 (deadline 2 s). SIGTERM to rank 1: it dies at once, as without ckpt; mpirun (and
                 this test) then SIGTERM rank 0: it prints the CkptTimeoutError with missing_ranks
                 [1] and this host, then dies by SIGTERM (143) (before: at the signal, silently).
Each rank runs under a shell that records its pid and exit status (rc.<rank>; 143 = SIGTERM).
"""
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
FAILED = []
# Each rank: its pid, then the command (exec keeps the pid), its stderr and exit status in $OUT.
WRAP = ('trap : TERM; '
        '"$0" "$@" 2>"$OUT/err.$OMPI_COMM_WORLD_RANK" & child=$!; echo $child >"$OUT/pid.$OMPI_COMM_WORLD_RANK"; '
        'wait $child; rc=$?; while kill -0 $child 2>/dev/null; do wait $child; rc=$?; done; '
        'echo $rc >"$OUT/rc.$OMPI_COMM_WORLD_RANK"')


def expect(cond, what, detail=""):
    print(("ok:     " if cond else "FAILED: ") + what)
    if not cond:
        FAILED.append(what)
        if detail:
            print(detail[-3000:])


def start(mpirun, out, cmd):
    """The job; its output is read into p.lines (a job blocked on a full pipe would skew the times)."""
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    p = subprocess.Popen(mpirun + ["-np", "2", "-x", "OUT", "bash", "-c", WRAP] + cmd, env=dict(ENV, OUT=out),
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    p.lines = []
    threading.Thread(target=lambda: p.lines.extend(iter(p.stdout.readline, b"")), daemon=True).start()
    return p


def text(p):
    return b"".join(p.lines).decode(errors="replace")


def read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def wait_for(pred, limit):
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()


def term(out, rank):
    """SIGTERMs the rank's process; returns the time it was sent."""
    pid = int(read(os.path.join(out, f"pid.{rank}")).strip())
    t = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    return t


def finish(p, out, rank, t_sig, limit):
    """Seconds from t_sig until the rank's exit status was recorded (None: not within limit), its status."""
    rc_path = os.path.join(out, f"rc.{rank}")
    done = wait_for(lambda: os.path.exists(rc_path) and read(rc_path).strip(), limit)
    secs = time.monotonic() - t_sig if done else None
    if p is None:
        return secs, read(rc_path).strip()
    try:  # the job itself is not timed: mpirun may wait odls_base_sigkill_timeout for what is left
        p.wait(timeout=2)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    return secs, read(rc_path).strip()


def case_between_saves(ckpt, scratch, mpirun):
    out, root = os.path.join(scratch, "between"), os.path.join(scratch, "between_root")
    shutil.rmtree(root, ignore_errors=True)
    p = start(mpirun, out, [ckpt, "train", "--root", root, "--model", "tiny", "--layout", "dp=2", "--steps", "10000000",
                            "--save-every", "4", "--log-interval", "1", "--timeout-ms", "5000", "--no-progress"])
    expect(wait_for(lambda: "train: iteration 6" in text(p) or p.poll() is not None, 120) and p.poll() is None,
           "between_saves: the job trains past its save of 4", text(p))
    t = term(out, 1)
    secs, rc = finish(p, out, 1, t, 20)
    err = read(os.path.join(out, "err.1"))
    print(f"between_saves: rank 1 ended {secs if secs is None else round(secs, 2)} s after SIGTERM, status {rc}")
    expect(secs is not None and secs < 3.0 and rc == "143",
           "between_saves: SIGTERM between saves ends rank 1 at once by the signal (< 3 s, 143)", err)
    expect("SIGTERM from the launcher" not in err, "between_saves: nothing was deferred", err)


def case_during_save(ckpt, scratch, mpirun):
    out, root = os.path.join(scratch, "during"), os.path.join(scratch, "during_root")
    shutil.rmtree(root, ignore_errors=True)
    p = start(mpirun, out, [ckpt, "save", "--root", root, "--iter", "1", "--model", "tiny", "--layout", "tp=2",
                            "--timeout-ms", "2000", "--no-progress",
                            "--faults", "point=step.vote rank=1 action=delay ms=8000"])
    held = wait_for(lambda: "delay at step.vote" in read(os.path.join(out, "err.1")), 120)
    expect(held, "during_save: rank 1 is held in the vote", text(p))
    time.sleep(0.3)  # rank 0 is in its vote wait
    t = term(out, 0)
    secs, rc = finish(p, out, 0, t, 15)
    err = read(os.path.join(out, "err.0"))
    print(f"during_save: rank 0 ended {secs if secs is None else round(secs, 2)} s after SIGTERM, status {rc}")
    expect("SIGTERM from the launcher" in err, "during_save: the SIGTERM was deferred", err)
    expect(rc == "2" and "rank(s) 1" in err and f"on host '{socket.gethostname()}'" in err and "'vote'" in err,
           "during_save: rank 0 ends by its deadline naming rank 1, its host and phase 'vote' (exit 2)", err)
    expect(secs is not None and 1.0 < secs < 8.0, "during_save: ... after the deadline, within the grace", err)


PY_JOB = r"""
import sys, time
import numpy as np
import ckpt
comm = ckpt.MpiComm()
if comm.rank == 1:
    print("sleeping", flush=True, file=sys.stderr)
    time.sleep(60)  # outside any ckpt call; never joins the save (a lost node)
w = np.arange(8, dtype=np.float32)
sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", w[comm.rank * 4:(comm.rank + 1) * 4].copy(), (0, comm.rank, 2))}
print("saving", flush=True, file=sys.stderr)
ckpt.save(sd, sys.argv[1], 1, comm=comm, timeout=2.0)
"""


def case_python(ckpt, scratch, mpirun):
    """One job: rank 1 SIGTERMed outside any ckpt call dies at once; mpirun then SIGTERMs rank 0,
    waiting in the save (and so does this test, in case it does not)."""
    del ckpt
    out, root, script = (os.path.join(scratch, n) for n in ("py", "py_root", "job.py"))
    shutil.rmtree(root, ignore_errors=True)
    with open(script, "w") as f:
        f.write(PY_JOB)
    # mpirun SIGKILLs what is left 1 s after its SIGTERM unless told otherwise (launcher_term.h)
    p = start(mpirun + ["--mca", "odls_base_sigkill_timeout", "30"], out, ["/usr/bin/python3", script, root])
    ready = wait_for(lambda: "saving" in read(os.path.join(out, "err.0")) and
                     "sleeping" in read(os.path.join(out, "err.1")), 120)
    expect(ready, "python: rank 0 is in the save, rank 1 outside ckpt", text(p))
    time.sleep(0.3)  # rank 0 in the save's wait
    t1 = term(out, 1)
    secs1, rc1 = finish(None, out, 1, t1, 5)
    t0 = term(out, 0)
    secs, rc = finish(p, out, 0, t1, 15)
    err = read(os.path.join(out, "err.0"))
    print(f"python: rank 1 (outside ckpt) ended {secs1 if secs1 is None else round(secs1, 2)} s after SIGTERM, "
          f"status {rc1}; rank 0 (in the save) {secs if secs is None else round(secs, 2)} s, status {rc}")
    expect(rc1 == "143" and secs1 is not None and secs1 < 3.0 and "SIGTERM" not in read(os.path.join(out, "err.1")),
           "python: SIGTERM outside a ckpt call ends rank 1 at once, as without ckpt")
    expect(rc == "143" and "CkptTimeoutError" in err and "missing_ranks=[1]" in err
           and f"missing_hosts=['{socket.gethostname()}']" in err and "SIGTERM from the launcher" in err,
           "python: rank 0 prints the CkptTimeoutError naming rank 1 and its host, then dies by SIGTERM", err)
    expect(secs is not None and t0 - t1 + 1.0 < secs < 8.0, "python: rank 0 ends after its deadline, within the grace",
           err)


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    ckpt, scratch, case = sys.argv[1], sys.argv[2], sys.argv[3]
    mpirun = "mpirun --allow-run-as-root --oversubscribe"
    if "--mpirun" in sys.argv:
        mpirun = sys.argv[sys.argv.index("--mpirun") + 1]
    os.makedirs(scratch, exist_ok=True)
    globals()["case_" + case](ckpt, scratch, shlex.split(mpirun))
    print(f"{case}: {len(FAILED)} failed")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
