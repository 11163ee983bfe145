#!/usr/bin/env python3
"""Readers beside a live root (issue 28 item 2): `ckpt train --save-every 1
--keep-last 2` commits and retires iterations in a loop while `ckpt verify`,
`ckpt verify --all`, `ckpt load --fallback`, `ckpt load` and (when the module
imports) Python `ckpt.verify` run beside it for a bounded time. A commit or a
removal under a reader is not damage: every reader run must succeed (0 false
damage reports, 0 failed loads), and the root must verify at the end.

Usage: verify_soak.py <ckpt> <scratch> [--seconds S]
CKPT_SOAK_S=<seconds> overrides --seconds (a longer run to measure: the counts
are printed as one JSON line, "soak: {...}"). Exits 1 on any false report, or
when the race was not exercised (too few commits/removals or reader runs).
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1")


def run(cmd, timeout=120):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.runs, self.bad, self.notes, self.removed = {}, {}, {}, {}
        self.examples = []

    def add(self, name, ok, detail="", noted=False, removed=False):
        with self.lock:
            self.runs[name] = self.runs.get(name, 0) + 1
            self.notes[name] = self.notes.get(name, 0) + int(noted)
            self.removed[name] = self.removed.get(name, 0) + int(removed)
            if not ok:
                self.bad[name] = self.bad.get(name, 0) + 1
                if len(self.examples) < 8:
                    self.examples.append("%s: %s" % (name, detail[-600:]))


def cli_reader(name, cmd, deadline, tally):
    while time.monotonic() < deadline:
        rc, out, err = run(cmd)
        tally.add(name, rc == 0, "rc %d\n%s%s" % (rc, out, err), noted="NOTE " in out or "removed while" in err,
                  removed="REMOVED" in out)


def python_reader(root, deadline, tally):
    try:
        import ckpt
        ckpt.verify  # noqa: B018 - a bare namespace package (module not built) has none
    except (ImportError, AttributeError) as e:  # not built: the CLI readers still run
        print("soak: python ckpt not importable (%s): ckpt.verify not run" % e)
        return
    while time.monotonic() < deadline:
        try:
            r = ckpt.verify(root)
            ok, detail = bool(r["ok"]), "; ".join(r["issues"])
            tally.add("python_verify", ok, detail, noted=bool(r.get("notes")), removed=bool(r.get("removed")))
        except Exception as e:  # noqa: BLE001 - any raise is a failed run
            tally.add("python_verify", False, "%s: %s" % (type(e).__name__, e))


def iterations(root):
    try:
        return sorted(n for n in os.listdir(root) if n.startswith("iter_"))
    except OSError:
        return []


def tracker(root):
    return int(open(os.path.join(root, "latest_checkpointed_iteration.txt")).read())


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    ckpt_bin, scratch = sys.argv[1], sys.argv[2]
    seconds = 25.0
    if "--seconds" in sys.argv:
        seconds = float(sys.argv[sys.argv.index("--seconds") + 1])
    seconds = float(os.environ.get("CKPT_SOAK_S", seconds))
    root = os.path.join(scratch, "root")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    log = open(os.path.join(scratch, "train.log"), "w")
    saver = subprocess.Popen([ckpt_bin, "train", "--root", root, "--model", "tiny", "--steps", "100000000",
                              "--save-every", "1", "--keep-last", "2"],
                             stdout=log, stderr=subprocess.STDOUT, env=ENV, start_new_session=True)
    t0 = time.monotonic()
    while not os.path.exists(os.path.join(root, "latest_checkpointed_iteration.txt")):
        if saver.poll() is not None or time.monotonic() - t0 > 60:
            print("soak: the saver did not commit a first iteration (exit %s)" % saver.poll())
            return 1
        time.sleep(0.05)
    first = tracker(root)
    tally = Tally()
    deadline = time.monotonic() + seconds
    # Every chunk is hash-checked; trained values have no pattern to compare
    # (--no-check) and the optimizer/resume state is not requested (--strict none).
    load = [ckpt_bin, "load", "--root", root, "--strict", "none", "--no-check"]
    readers = [
        threading.Thread(target=cli_reader, args=("verify", [ckpt_bin, "verify", root], deadline, tally)),
        threading.Thread(target=cli_reader, args=("verify_all", [ckpt_bin, "verify", root, "--all"], deadline, tally)),
        threading.Thread(target=cli_reader, args=("load_fallback", load + ["--fallback"], deadline, tally)),
        threading.Thread(target=cli_reader, args=("load", load, deadline, tally)),
        threading.Thread(target=python_reader, args=(root, deadline, tally)),
    ]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    os.killpg(saver.pid, signal.SIGKILL)
    saver.wait()
    log.close()
    last = iterations(root)
    # Counted on disk (the saver's log may not be flushed when it is killed):
    # iterations committed during the window, and those retention removed.
    committed = tracker(root) - first
    deleted = tracker(root) - len(last)
    rc, out, err = run([ckpt_bin, "verify", root, "--all"])
    result = {"seconds": seconds, "commits": committed, "retentions": deleted, "runs": tally.runs,
              "false_reports": tally.bad, "notes": tally.notes, "removed": tally.removed,
              "final_verify_all_rc": rc, "kept": last}
    print("soak: " + json.dumps(result, sort_keys=True))
    for e in tally.examples:
        print("  false report: " + e.replace("\n", "\n    "))
    failed = []
    if sum(tally.bad.values()):
        failed.append("%d false reports / failed loads" % sum(tally.bad.values()))
    if rc != 0:
        failed.append("the root does not verify at the end (rc %d): %s%s" % (rc, out[-600:], err[-600:]))
    if committed < 5 or deleted < 3:
        failed.append("race not exercised: %d commits, %d retentions" % (committed, deleted))
    for name in ("verify", "verify_all", "load_fallback", "load"):
        if tally.runs.get(name, 0) < 3:
            failed.append("race not exercised: %d runs of %s" % (tally.runs.get(name, 0), name))
    for f in failed:
        print("FAIL " + f)
    print("soak: %s" % ("FAILED" if failed else "ok"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
