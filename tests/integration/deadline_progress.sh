#!/usr/bin/env bash
# Deadlines that measure progress, the commit point, timeouts as numbers
# (issue 28 items 3, 4, 6), in real mpirun jobs:
#   deadline_progress.sh <ckpt-binary> <scratch-dir>      (MPIRUN: the mpirun prefix)
# 1. Rank 1 writes slowly but steadily (each of its ~100 pwrites +40 ms) for
#    over two deadlines of 1500 ms: the save commits on every rank (exit 0).
#    Before: rank 0 failed it in phase 'vote' after one deadline. A rank whose
#    writes stop (hung fsync) is still named in phase 'vote' and the job ends.
# 2. Rank 0 hangs in the root fsync after the directory rename (the commit
#    point is not reached): the job ends with exit 3 (outcome unknown) and rank
#    1 says "outcome unknown", never "committed". Before: exit 0, "committed".
# 3. --timeout-ms 0 / 9223372036854 / 1.5: exit 2 with one short line naming
#    the accepted range. Before: a 300-digit number, or exit 2 and no message.
set -euo pipefail
ckpt=$1 scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch"
cd "$scratch"
fail() { echo "FAILED: $*"; exit 1; }
now() { date +%s.%N; }
secs_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# ---- 1. a slow but steady non-root writer commits ----
# Every pwrite of rank 1 is delayed (one rule per call: `persistent` delays
# are newer than this check, which must also run against older builds).
spec=$(for i in $(seq 1 300); do printf 'point=env.pwrite rank=1 nth=%d action=delay ms=%d;' "$i" "${SLOW_MS:-40}"; done)
t0=$(now)
rc=0
timeout 60 $MPIRUN -np 2 "$ckpt" save --root slow --layout tp=2 --iter 10 --chunk-kb 64 --timeout-ms 1500 \
  --faults "$spec" >slow.out 2>slow.err || rc=$?
secs=$(secs_since "$t0")
echo "slow rank 1 (every pwrite +${SLOW_MS:-40} ms: $(grep -c 'delay at' slow.err) delays), deadline 1.5 s: exit $rc after $secs s"
[[ $rc == 0 ]] || fail "the slow but steady save did not commit: $(grep 'ckpt save' slow.err | head -3)"
awk -v s="$secs" 'BEGIN { exit !(s > 3.5) }' || fail "rank 1 was not slow ($secs s): the check proves nothing"
[[ -e slow/iter_0000010/manifest.json ]] || fail "iteration 10 is not committed"

# ---- 1b. a rank whose writes stop is named (and the job ends: MPI_Abort) ----
rc=0
t0=$(now)
timeout 60 $MPIRUN -np 2 "$ckpt" save --root stall --layout tp=2 --iter 10 --timeout-ms 1000 \
  --faults "point=env.fsync rank=1 action=hang" >stall.out 2>stall.err || rc=$?
secs=$(secs_since "$t0")
echo "rank 1 hung in its fsync: exit $rc after $secs s: $(grep 'ckpt save: rank 0' stall.err | cut -c1-140)"
[[ $rc == 2 ]] || fail "exit $rc, want 2"
grep -q "rank 0: Timeout: rank 0: no progress from rank(s) 1 within 1000 ms in phase 'vote'" stall.err ||
  fail "rank 0 does not name rank 1: $(grep 'ckpt save' stall.err)"
[[ ! -e stall/iter_0000010 ]] || fail "iteration 10 was committed"

# ---- 2. rank 0 hangs before the commit point: outcome unknown, exit 3 ----
rc=0
t0=$(now)
timeout 60 $MPIRUN -np 2 "$ckpt" save --root hang --layout tp=2 --iter 10 --timeout-ms 1000 \
  --faults "point=step.root_fsync rank=0 action=hang" >hang.out 2>hang.err || rc=$?
secs=$(secs_since "$t0")
echo "rank 0 hung in the root fsync: exit $rc after $secs s; rank 1: $(grep 'rank 1:' hang.err | head -1 | cut -c1-160)"
[[ $rc == 3 ]] || fail "exit $rc, want 3 (outcome unknown): $(cat hang.err | head -5)"
grep -q "ckpt save: rank 1: OutcomeUnknown: outcome unknown: iteration 10 is visible" hang.err ||
  fail "rank 1 does not report an unknown outcome"
! grep -q "committed" hang.out || fail "the save reported a commit: $(cat hang.out)"

# ---- 3. timeouts as numbers: one short message naming the range ----
for bad in 0 9223372036854 1.5 -1; do
  rc=0
  "$ckpt" save --root num --layout tp=1 --timeout-ms="$bad" >num.out 2>num.err || rc=$?
  echo "--timeout-ms $bad: exit $rc: $(head -c 200 num.err | head -1)"
  [[ $rc == 2 ]] || fail "--timeout-ms $bad: exit $rc, want 2"
  grep -q "1 .. 604800000 ms" num.err || fail "--timeout-ms $bad: the message does not name the range"
  (($(wc -c <num.err) < 400)) || fail "--timeout-ms $bad: a $(wc -c <num.err)-byte message"
done
echo "deadline_progress: ok"
