#!/usr/bin/env bash
# A survivor exits in bounded time even when MPI_Abort cannot end the job
# (issue 31 item 4: a node cut off by a partition keeps mpirun waiting for
# its daemon, and MPI_Abort, which asks mpirun, never returns):
#   abort_watchdog.sh <ckpt-binary> <scratch-dir>
# A 2-rank `ckpt save` (deadline 2 s) whose rank 1 hangs in the vote. Once
# the save is under way (its tmp dir exists), mpirun is stopped (SIGSTOP),
# standing in for a launcher that cannot reach a node. Rank 0 must still exit
# within deadline + 5 s, with the error exit code (2), naming rank 1, its host
# and phase 'vote'. Before the watchdog (comm_mpi.h EndJobIfHung) rank 0 stayed
# in MPI_Abort for as long as mpirun was stopped. MPIRUN holds the mpirun prefix.
set -euo pipefail
ckpt=$1 scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch"
cd "$scratch"
deadline_ms=2000 bound_s=7
mpirun_pid=""
cleanup() {
  for f in pid.0 pid.1; do [[ -s $f ]] && kill -9 "$(cat "$f")" 2>/dev/null || true; done
  if [[ -n $mpirun_pid ]]; then
    kill -CONT "$mpirun_pid" 2>/dev/null || true
    kill "$mpirun_pid" 2>/dev/null || true
    wait "$mpirun_pid" 2>/dev/null || true
  fi
}
trap cleanup EXIT
fail() { echo "FAILED: $*"; for r in 0 1; do echo "--- rank $r stderr:"; cat "err.$r" 2>/dev/null || true; done; exit 1; }

# Each rank: ckpt in the background (its pid for the cleanup), then its exit code.
# shellcheck disable=SC2016,SC2086
$MPIRUN -np 2 bash -c '"$0" "${@:1}" 2>"err.$OMPI_COMM_WORLD_RANK" & echo $! >"pid.$OMPI_COMM_WORLD_RANK";
  wait $!; echo $? >"rc.$OMPI_COMM_WORLD_RANK"' \
  "$ckpt" save --root r --layout tp=2 --iter 20 --timeout-ms $deadline_ms --no-progress \
  --faults "point=step.vote rank=1 action=hang" >job.out 2>&1 &
mpirun_pid=$!

for ((i = 0; i < 1200; i++)); do  # up to 60 s for start-up
  compgen -G "r/.iter_0000020.tmp-*" >/dev/null && break
  sleep 0.05
done
compgen -G "r/.iter_0000020.tmp-*" >/dev/null || fail "the save did not start within 60 s"
kill -STOP "$mpirun_pid"
t0=$(date +%s.%N)
while [[ ! -s rc.0 ]] && awk -v a="$t0" -v b="$(date +%s.%N)" -v l=$bound_s 'BEGIN { exit !(b - a < l + 3) }'; do
  sleep 0.05
done
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
[[ -s rc.0 ]] || fail "rank 0 did not exit within $secs s with mpirun stopped (bound: deadline + 5 s = $bound_s s)"
echo "rank 0 exited $secs s after mpirun stopped (deadline $((deadline_ms / 1000)) s, bound $bound_s s), code $(cat rc.0)"
awk -v s="$secs" -v l=$bound_s 'BEGIN { exit !(s <= l) }' || fail "rank 0 took $secs s > $bound_s s"
[[ $(cat rc.0) == 2 ]] || fail "rank 0 exit code $(cat rc.0), want 2 (error)"
host=$(hostname)
grep -qF "rank(s) 1 within $deadline_ms ms in phase 'vote' (rank 1 on host '$host')" err.0 ||
  fail "rank 0 does not name rank 1, its host '$host' and phase 'vote'"
grep -q "MPI_Abort did not end this process" err.0 || fail "rank 0 did not end through the abort watchdog"
[[ ! -e r/iter_0000020 ]] || fail "iteration 20 was committed"
echo "abort watchdog: ok"
