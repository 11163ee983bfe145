#!/usr/bin/env bash
# What every rank of a real mpirun job reports when one rank fails:
#   commit_outcomes.sh <ckpt-binary> <scratch-dir>
# 1. A plan step failing on rank 1 (deadline 20 s): every rank fails at once
#    (well under the deadline), naming rank 1 and phase 'plan'.
# 2. The tracker update failing after the commit: the save exits 0 on every
#    rank with "committed iteration 20, but tracker update failed", the
#    tracker still names 10, and both `ckpt load` and the campaign's recovery
#    load find iteration 20 (latest = newest committed at or above the tracker).
# 3. A damaged chunk read by one rank (tp=2) or by two (tp=2,dp=2): every rank
#    of the load exits with the same code, 1 (check failed), for `ckpt load`
#    and `ckpt faults child --phase load`.
# MPIRUN holds the mpirun prefix.
set -euo pipefail
ckpt=$1 scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch"
cd "$scratch"
fail() { echo "FAILED: $*"; exit 1; }
# A failed faults child ends without MPI_Finalize; --enable-recovery keeps
# mpirun from killing the other ranks before they report.
child() { $MPIRUN --enable-recovery -np "$1" "$ckpt" faults child "${@:2}"; }

# Runs "<ckpt> <args>" on N ranks; prints each rank's exit code, in rank order.
# MPI_EXTRA: more mpirun flags (--enable-recovery: a rank that ends without
# MPI_Finalize, as a failed faults child does, must not kill the others).
rank_exits() {
  local n=$1 dir
  shift
  dir=$(mktemp -d exits.XXXX)
  # shellcheck disable=SC2016,SC2086
  $MPIRUN ${MPI_EXTRA:-} -np "$n" bash -c '"$0" "${@:2}" >/dev/null 2>"$1/err.$OMPI_COMM_WORLD_RANK"; echo $? >"$1/rc.$OMPI_COMM_WORLD_RANK"' \
    "$ckpt" "$dir" "$@" || true
  for ((r = 0; r < n; r++)); do echo -n "$(cat "$dir/rc.$r" 2>/dev/null || echo none) "; done
  echo
}

# ---- 1. plan failure: fails fast, everyone names rank 1 ----
child 4 --phase save --root r --layout tp=2,dp=2 --iter 10 >/dev/null
t0=$(date +%s.%N)
child 4 --phase save --root r --layout tp=2,dp=2 --iter 15 --timeout-ms 20000 \
  --spec "point=step.plan rank=1 action=eio" >plan.out 2>plan.err || true
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
echo "plan failure on rank 1: every rank failed after $secs s (deadline 20 s)"
grep -q "child save: rank 1: IOError: .*phase 'plan'" plan.err || fail "rank 1 does not report its own error"
awk -v s="$secs" 'BEGIN { exit !(s < 8) }' || fail "a failing plan step cost $secs s: the ranks waited for it"
for r in 0 2 3; do
  grep -E "child save: rank $r: .*rank 1 failed: .*phase 'plan'" plan.err >/dev/null ||
    fail "rank $r does not name rank 1 in phase 'plan': $(grep "rank $r:" plan.err)"
done
[[ ! -e r/iter_0000015 ]] || fail "iteration 15 was committed"

# ---- 2. tracker update fails after the commit: committed, latest is 20 ----
child 4 --phase save --root r --layout tp=2,dp=2 --iter 20 --timeout-ms 5000 \
  --spec "point=step.tracker_update rank=0 action=eio" >tracker.out 2>tracker.err ||
  fail "the save whose tracker update failed did not exit 0: $(cat tracker.err)"
for r in 0 1 2 3; do
  grep -q "rank $r: committed iteration 20, but tracker update failed: IOError" tracker.err ||
    fail "rank $r does not report the committed save's warning"
done
[[ $(cat r/latest_checkpointed_iteration.txt) == 10 ]] || fail "the tracker moved"
out=$($MPIRUN -np 2 "$ckpt" load --root r --layout tp=2 --no-check)
echo "$out" | head -1
grep -q "^load  iter 20 " <<<"$out" || fail "ckpt load did not find the committed iteration 20"
out=$(child 2 --phase load --root r --layout tp=2 | tail -1)
echo "recovery: $out"
grep -q '"iteration":20,"mismatches":0,"ok":true' <<<"$out" || fail "recovery did not load 20 bit for bit"

# ---- 3. damaged chunk: one exit code on every rank ----
$MPIRUN -np 2 "$ckpt" save --root d --iter 10 --layout tp=2 >/dev/null
"$ckpt" faults damage --root d --file rank_00001.h5 --kind bitflip --chunk mid >/dev/null
want1="1 1 " want2="1 1 1 1 "
got=$(rank_exits 2 load --root d --layout tp=2)
echo "ckpt load tp=2 (rank 1 reads the damage): exits $got"
[[ $got == "$want1" ]] || fail "ckpt load exit codes differ or are not 1: $got"
got=$(rank_exits 4 load --root d --layout tp=2,dp=2)
echo "ckpt load tp=2,dp=2 (ranks 1 and 3 read it): exits $got"
[[ $got == "$want2" ]] || fail "ckpt load exit codes differ or are not 1: $got"
child 4 --phase save --root c --layout tp=2,dp=2 --iter 10 >/dev/null
"$ckpt" faults damage --root c --file rank_00001.h5 --kind bitflip --chunk mid >/dev/null
got=$(MPI_EXTRA=--enable-recovery rank_exits 4 faults child --phase load --root c --layout tp=2,dp=2)
echo "faults child load tp=2,dp=2: exits $got"
[[ $got == "$want2" ]] || fail "faults child load exit codes differ or are not 1: $got"
cd / && rm -rf "$scratch"
echo "commit outcomes: OK"
