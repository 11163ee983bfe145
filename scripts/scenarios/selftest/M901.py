#!/usr/bin/env python3
# title: runner self-test: a headline citing a number that was not measured
# question: (none: tests the runner)
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from scenlib import *  # noqa: E402,F403

emit("runner self-test", "none", {"measured": 1}, [("ok", True)], "claims must cite measured values",
     "control", {"failures_seen": 1}, True, headline="{measured} ops", headline_en="{not_measured} ops")
