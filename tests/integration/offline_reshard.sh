#!/usr/bin/env bash
# Offline reshard: save TP2xPP2xDP2 with mpirun, `ckpt plan` and `ckpt reshard`
# it to TP4 and to TP1xPP2, then load each result (its own layout and another)
# checking every element; the output must be a committed, verifiable checkpoint.
set -euo pipefail
ckpt=$1 scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch"
$MPIRUN -np 8 "$ckpt" save --root "$scratch/src" --iter 7 --model tiny --layout tp=2,pp=2,dp=2
plan=$("$ckpt" plan "$scratch/src" --to tp=4 --json)
head -5 <<<"$plan"
grep -q '"ranks": 4' <<<"$plan"
check() {  # check <root> <np> <layout>
  out=$($MPIRUN -np "$2" "$ckpt" load --root "$1" --layout "$3")
  echo "$out"
  grep -q "mismatches 0" <<<"$out"
}
"$ckpt" reshard "$scratch/src" "$scratch/tp4" --to tp=4
"$ckpt" verify "$scratch/tp4"
grep -q '"tp": 4' <<<"$("$ckpt" inspect --json "$scratch/tp4")"
check "$scratch/tp4" 4 tp=4
check "$scratch/tp4" 1 tp=1
"$ckpt" reshard "$scratch/src" "$scratch/pp2" --to tp=1,pp=2 --compress zstd
"$ckpt" verify "$scratch/pp2"
check "$scratch/pp2" 2 tp=1,pp=2
check "$scratch/pp2" 8 tp=8
# The destination refuses to be overwritten: a second reshard into it fails, the first stays.
if "$ckpt" reshard "$scratch/src" "$scratch/tp4" --to tp=2 2>"$scratch/err"; then
  echo "FAILED: reshard replaced an existing iteration"; exit 1
fi
grep -q "already exists" "$scratch/err"
check "$scratch/tp4" 4 tp=4
# Optimizer state travels with the model: save DP2 with model-space optimizer
# state, reshard offline to TP2xDP1 and load it there checking optimizer elements.
$MPIRUN -np 2 "$ckpt" save --root "$scratch/opt" --iter 3 --model tiny --layout dp=2 --optimizer model
"$ckpt" reshard "$scratch/opt" "$scratch/opt-tp2" --to tp=2
out=$($MPIRUN -np 2 "$ckpt" load --root "$scratch/opt-tp2" --layout tp=2)
echo "$out"
grep -q "mismatches 0" <<<"$out"
grep -qE "optimizer [1-9][0-9]*\)" <<<"$out" || { echo "FAILED: optimizer state not carried"; exit 1; }
# A `ckpt train` checkpoint (its Adam state under optimizer.state.<s>.<key>,
# metadata.train) reshards with its optimizer state and resumes bitwise-strict
# under the new layout (issue 16: it used to be refused).
$MPIRUN -np 2 "$ckpt" train --layout tp=2 --model tiny --steps 2 --root "$scratch/train" >/dev/null
"$ckpt" reshard "$scratch/train" "$scratch/train-tp1" --to tp=1
"$ckpt" train --layout tp=1 --model tiny --steps 3 --root "$scratch/train-tp1" --resume >"$scratch/out"
grep -q "saved iteration 3" "$scratch/out" || { echo "FAILED: resume from the resharded train checkpoint"; exit 1; }
# State the target layout rules do not describe is still never dropped silently.
$MPIRUN -np 2 "$ckpt" save --root "$scratch/bucket" --iter 1 --model tiny --layout dp=2 --optimizer bucket >/dev/null
if "$ckpt" reshard "$scratch/bucket" "$scratch/bucket-tp2" --to tp=2 2>"$scratch/err"; then
  echo "FAILED: reshard accepted bucket-space optimizer state"; exit 1
fi
grep -q "bucket space" "$scratch/err"
rm -rf "$scratch"
echo "offline reshard: PASSED"
