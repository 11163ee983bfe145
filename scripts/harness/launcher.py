"""The one launcher of the scenario and bench drivers: run a job with a deadline
and, when the deadline expires (or the job's leader exits and leaves strays),
kill every process of that job.

A job is one command (usually `mpirun -np N ...`). It runs in a session of its
own (setsid), so its session id is the leader's pid. "Every process of the job"
is the union of
  - every process whose session id is the job's (a rank that outlived mpirun
    and was re-parented keeps its session unless it called setsid itself), and
  - every descendant of the leader seen while the job ran (parent links are
    sampled every poll; this launcher is a child subreaper, so an orphaned rank
    is re-parented to it and stays findable even after a setsid of its own).
On expiry each of them gets SIGTERM, then SIGKILL after a grace period; a
process is identified by (pid, start time), so a recycled pid is never hit.

Contract: run_job never raises for the job's own failures (a missing program
is rc 127); it returns within deadline + grace + about a second; it leaves no
process of the job behind. Not thread safe (one job per call, sequential use).

Command line (for drivers in other languages and by hand):
  launcher.py --deadline S [--stdout F] [--stderr F] -- CMD...
exits with the job's exit code, 124 when the deadline expired.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

POLL_S = 0.05
SCAN_EVERY_S = 0.25
_PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the session scan alone finds the job's processes


_become_subreaper()


def _stat(pid: int):
    """(ppid, session id, start time) of a process, None if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read().decode("ascii", "replace")
    except OSError:
        return None
    rest = data[data.rfind(")") + 2:].split()
    # state ppid pgrp session ... field 22 of stat (starttime) is rest[19]
    if rest[0] == "Z":
        return None
    return int(rest[1]), int(rest[3]), int(rest[19])


def _all_procs():
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None:
                yield int(name), st


@dataclass
class JobResult:
    rc: int                 # exit code; -signal if the leader died of a signal; 124 on expiry
    timed_out: bool
    seconds: float
    killed: int = 0         # processes of the job that had to be killed (expiry or strays)
    stray_pids: list = field(default_factory=list)


class _Tracker:
    """The set of (pid, start time) that belong to a job."""

    def __init__(self, leader: int):
        self.leader, self.sid = leader, leader
        self.members: dict[int, int] = {}

    def scan(self) -> None:
        procs = dict(_all_procs())
        me = os.getpid()
        for pid, (ppid, sid, start) in procs.items():
            if (sid == self.sid or ppid == me) and pid != me:  # ppid == me: an orphan of this job
                self.members[pid] = start
        grew = True
        while grew:  # descendants of known members (follows setsid'ed children too)
            grew = False
            for pid, (ppid, sid, start) in procs.items():
                if pid not in self.members and (ppid in self.members or ppid == self.leader):
                    self.members[pid] = start
                    grew = True
        # drop the ones that are gone or whose pid was recycled
        for pid in [p for p, s in self.members.items() if p not in procs or procs[p][2] != s]:
            del self.members[pid]

    def alive(self) -> list[int]:
        self.scan()
        return list(self.members)

    def signal(self, sig: int) -> int:
        n = 0
        for pid in self.alive():
            try:
                os.kill(pid, sig)
                n += 1
            except OSError:
                pass
        return n

    def reap(self) -> None:
        """Collects exited processes re-parented to us (we are a subreaper)."""
        me = os.getpid()
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == self.leader:
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    data = f.read().decode("ascii", "replace")
            except OSError:
                continue
            rest = data[data.rfind(")") + 2:].split()
            if rest[0] == "Z" and int(rest[1]) == me:
                try:
                    os.waitpid(int(name), os.WNOHANG)
                except OSError:
                    pass


def kill_job(tracker: _Tracker, grace_s: float) -> int:
    """SIGTERM every process of the job, SIGKILL what is left after grace_s."""
    n = tracker.signal(signal.SIGTERM)
    end = time.monotonic() + grace_s
    while time.monotonic() < end and tracker.alive():
        tracker.reap()
        time.sleep(POLL_S)
    left = tracker.alive()
    tracker.signal(signal.SIGKILL)
    for _ in range(100):
        tracker.reap()
        if not tracker.alive():
            break
        time.sleep(POLL_S)
    return max(n, len(left))


def run_job(argv, deadline_s: float, stdout=None, stderr=None, env=None, cwd=None,
            grace_s: float = 2.0) -> JobResult:
    """Runs argv with stdin from /dev/null; stdout/stderr: None (inherit), a
    path (str, truncated) or an open file. Kills the whole job past deadline_s."""
    def sink(x):
        return open(x, "wb") if isinstance(x, (str, os.PathLike)) else x
    out, err = sink(stdout), sink(stderr)
    t0 = time.monotonic()
    try:
        proc = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, cwd=cwd,
                                start_new_session=True)
    except OSError as e:
        if err is not None and hasattr(err, "write"):
            err.write(f"launcher: cannot start {argv[0]}: {e}\n".encode())
        return JobResult(rc=127, timed_out=False, seconds=0.0)
    finally:
        for f, x in ((out, stdout), (err, stderr)):
            if f is not None and f is not x:
                f.close()
    tracker = _Tracker(proc.pid)
    timed_out, last_scan = False, 0.0
    while proc.poll() is None:
        now = time.monotonic()
        if now - t0 > deadline_s:
            timed_out = True
            break
        if now - last_scan > SCAN_EVERY_S:
            tracker.scan()
            tracker.reap()
            last_scan = now
        time.sleep(POLL_S)
    killed = 0
    if timed_out:
        killed = kill_job(tracker, grace_s)
        proc.wait()
    tracker.members.pop(proc.pid, None)
    strays = tracker.alive()
    if strays and not timed_out:  # a rank that outlived its mpirun
        killed += kill_job(tracker, grace_s=0.5)
    rc = 124 if timed_out else proc.returncode
    return JobResult(rc=rc, timed_out=timed_out, seconds=time.monotonic() - t0, killed=killed, stray_pids=strays)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--deadline", type=float, required=True, help="seconds")
    ap.add_argument("--stdout")
    ap.add_argument("--stderr")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    cmd = a.cmd[1:] if a.cmd[:1] == ["--"] else a.cmd
    if not cmd:
        ap.error("no command")
    r = run_job(cmd, a.deadline, a.stdout, a.stderr)
    if r.timed_out:
        print(f"launcher: deadline {a.deadline} s expired; killed {r.killed} processes", file=sys.stderr)
    return r.rc if r.rc >= 0 else 128 - r.rc


if __name__ == "__main__":
    sys.exit(main())
