#!/usr/bin/env bash
# The GPU path from the command line, judged by what this machine has
# (`ckpt gpu --json`):
#   gpu_paths.sh <ckpt-binary> <scratch-dir>
# - no GPU (dev boxes, CI) or a build without CUDA: `ckpt load --share-transport
#   nccl` and `ckpt train --async-save --snapshot-memory pinned` fail on every
#   rank with exit 2, naming the cause (no CUDA device / built without), and
#   the checkpoint under the root is untouched (still loads, tracker unchanged);
# - one GPU: pinned snapshots work (train == the host-memory run, bit for
#   bit); the NCCL data plane with two ranks on one device must fail cleanly
#   at init (NCCL allows one rank per device), not hang;
# - two or more GPUs: the NCCL data plane loads DP2 with 0 mismatches and
#   reads each chunk from disk once, like the MPI transport.
# MPIRUN holds the mpirun prefix.
set -euo pipefail
ckpt=$1 scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch"
root=$scratch/ckpt
fail() { echo "FAILED: $*"; exit 1; }
info=$("$ckpt" gpu --json || true)
get() { python3 -c "import json,sys; print(json.loads(sys.argv[1])['$1'])" "$info"; }
compiled=$(get compiled) devices=$(get device_count)
echo "GPU path compiled=$compiled devices=$devices"
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }

$MPIRUN -np 1 "$ckpt" save --root "$root" --iter 10 --model tiny --layout tp=1 --optimizer model >/dev/null
tracker_before=$(cat "$root/latest_checkpointed_iteration.txt")

# ---- NCCL data plane for shared reads (DP2: both ranks need every chunk)
rc=0
$MPIRUN -np 2 "$ckpt" load --root "$root" --layout dp=2 --share-reads dp --share-transport nccl --json \
  >"$scratch/nccl.out" 2>"$scratch/nccl.err" || rc=$?
if [[ $compiled == True && $devices -ge 2 ]]; then
  ((rc == 0)) || fail "nccl load failed (rc $rc): $(cat "$scratch/nccl.err")"
  out=$(grep '^{' "$scratch/nccl.out")
  [[ $(field mismatches <<<"$out") == 0 && $(field optimizer_mismatches <<<"$out") == 0 ]] || fail "nccl: $out"
  mpi=$($MPIRUN -np 2 "$ckpt" load --root "$root" --layout dp=2 --share-reads dp --json | grep '^{')
  [[ $(field bytes <<<"$out") == $(field bytes <<<"$mpi") ]] || fail "nccl read $(field bytes <<<"$out") B, mpi $(field bytes <<<"$mpi") B"
  [[ $(field bytes_received <<<"$out") -gt 0 ]] || fail "nccl: nothing received over NCCL: $out"
  echo "nccl DP2 load: 0 mismatches, read $(field bytes <<<"$out") B, received $(field bytes_received <<<"$out") B over NCCL"
else
  ((rc == 2)) || fail "nccl load without two GPUs: expected exit 2, got $rc: $(cat "$scratch/nccl.err")"
  if [[ $compiled != True ]]; then want="built without"
  elif ((devices == 0)); then want="no CUDA device"
  else want="NCCL"; fi
  for r in 0 1; do
    grep -q "ckpt load: rank $r: .*$want" "$scratch/nccl.err" || fail "rank $r does not name '$want': $(cat "$scratch/nccl.err")"
  done
  echo "nccl DP2 load refused on every rank: $(grep -m1 'rank 0' "$scratch/nccl.err")"
fi

# ---- pinned snapshot memory for async saves
rc=0
$MPIRUN -np 2 "$ckpt" train --root "$scratch/pinned" --layout dp=2 --steps 4 --save-every 2 --async-save \
  --snapshot-memory pinned --json >"$scratch/pinned.out" 2>"$scratch/pinned.err" || rc=$?
if [[ $compiled == True && $devices -ge 1 ]]; then
  ((rc == 0)) || fail "pinned train failed (rc $rc): $(cat "$scratch/pinned.err")"
  $MPIRUN -np 2 "$ckpt" train --root "$scratch/host" --layout dp=2 --steps 4 --save-every 2 --async-save >/dev/null
  d=$("$ckpt" diff "$scratch/host" "$scratch/pinned" --json)
  [[ $(field same <<<"$d") == True ]] || fail "pinned snapshot differs from host snapshot: $d"
  echo "pinned snapshots: iteration 4 identical to the host-memory run"
else
  ((rc == 2)) || fail "pinned train without a GPU: expected exit 2, got $rc"
  want=$([[ $compiled == True ]] && echo "no CUDA device" || echo "built without")
  grep -q "$want" "$scratch/pinned.err" || fail "pinned train does not name '$want': $(cat "$scratch/pinned.err")"
  [[ ! -e $scratch/pinned/latest_checkpointed_iteration.txt ]] || fail "pinned train wrote a checkpoint"
  echo "pinned train refused: $(head -1 "$scratch/pinned.err")"
fi

# Nothing committed was touched.
[[ $(cat "$root/latest_checkpointed_iteration.txt") == "$tracker_before" ]] || fail "tracker changed"
"$ckpt" verify "$root" >/dev/null || fail "checkpoint no longer verifies"
echo "gpu_paths: ok"
