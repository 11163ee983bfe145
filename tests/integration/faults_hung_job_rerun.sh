#!/usr/bin/env bash
# The campaign's re-run rule (faults/campaign_internal.h RunOneJob): a faulted
# job that outlives its limit is re-run once and the re-run's outcome counts
# (mpirun 4.1 once did not exit 39 s after every rank had reported, 1 of 190).
#   faults_hung_job_rerun.sh <ckpt-binary> <scratch-dir>
# The jobs go through an mpirun wrapper whose first faulted job (the first
# command line with --spec) hangs; every other job runs normally. Expected: the
# campaign exits 0, reports that one run under `reruns`, judges the re-run
# (new: a crash after the commit point), and counts no hang. Without the rule
# the hung job is judged a hang (a violation: exit 1).
# MPIRUN holds the mpirun prefix.
set -euo pipefail
ckpt=$1 scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch"
fail() { echo "FAILED: $*"; exit 1; }
wrapper=$scratch/mpirun_hang_once
cat > "$wrapper" <<WRAP
#!/usr/bin/env bash
if [[ " \$* " == *" --spec "* ]] && mkdir "$scratch/hung_once" 2>/dev/null; then exec sleep 600; fi
exec $MPIRUN "\$@"
WRAP
chmod +x "$wrapper"
rc=0
"$ckpt" faults run --work "$scratch/c" --layout tp=2 --model tiny --timeout-ms 1000 --variants crash \
  --points step.commit --ranks 0 --mpirun "$wrapper" --json "$scratch/report.json" --quiet || rc=$?
[[ -d $scratch/hung_once ]] || fail "the wrapper never hung a faulted job"
[[ $rc == 0 ]] || fail "campaign exit $rc (expected 0: the re-run decides)"
/usr/bin/python3 - "$scratch/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["reruns"] == ["crash @ r0 step.commit#1"], r["reruns"]
assert r["violations"] == 0, r["violations"]
print("reruns:", r["reruns"], "violations:", r["violations"])
PY
echo "PASSED: the hung faulted job was re-run once and judged"
