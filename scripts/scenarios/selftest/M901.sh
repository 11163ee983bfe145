#!/usr/bin/env bash
# title: runner self-test: a headline citing a number that was not measured
# question: (none: tests the runner)
# shellcheck source=lib.sh
source "${SCENARIO_LIB:-$(dirname "$0")/lib.sh}"
py <<'PYEOF'
emit("runner self-test", "none", {"measured": 1}, [("ok", True)], "claims must cite measured values",
     "control", {"failures_seen": 1}, True, headline="{not_measured} ops")
PYEOF
