#!/usr/bin/env python3
# title: runner self-test: a negative control that stopped showing the failure
# question: (none: tests the runner)
# Its measurement passes, but its control measures no failure (as when a
# mechanism's negative control silently stops mattering): `ckpt scenario run`
# must fail the run and say so.
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scenlib import *  # noqa: E402,F403

must("ins", ck("--help"))
lines = len(TXT("ins").splitlines())
emit("runner self-test", "ckpt --help", {"help_lines": lines}, [("help printed", lines > 0)],
     "the runner checks shows_failure", "a control that measured nothing wrong", {"failures_seen": 0}, False,
     headline="{help_lines} lines", headline_en="{help_lines} lines")
