#!/usr/bin/env python3
# title: runner self-test: a step that hangs past its deadline
# question: (none: tests the runner and the launcher)
# A two-rank job whose ranks block forever (sleep) under a 2 s step deadline:
# the launcher must kill every process of the job (mpirun and both ranks) and
# the step must report 124; the scenario then passes. A rank left alive would
# show up in the process table under this scenario's marker argument.
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scenlib import *  # noqa: E402,F403

marker = f"{3600 + os.getpid() % 1000}"
t0 = now()
r = run_to("hang", MPIRUN + ["-np", "2", "sleep", marker], deadline_s=2.0)
took = now() - t0
left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True).stdout.split()
emit("runner self-test", "2-rank mpirun of `sleep`, 2 s step deadline",
     {"rc": RC("hang"), "seconds": round(took, 2), "killed": r.killed, "left_alive": len(left)},
     [("deadline expired: rc 124", RC("hang") == 124), ("no process of the job left", not left),
      ("killed within deadline + grace + 2 s", took < 6.0)],
     "the launcher kills every process of a job past its deadline", "none", {"x": 1}, True,
     headline="rc={rc}, {killed} killed, {left_alive} left, {seconds} s",
     headline_en="rc={rc}, {killed} killed, {left_alive} left, {seconds} s")
