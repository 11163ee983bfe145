#!/usr/bin/env bash
# One distributed-optimizer save/load case with real processes:
#   optimizer_load.sh <ckpt-binary> <scratch-dir> <model-spec> <save-layout> "<save flags>" <load>...
#   <load> = <layout>[+<flag>...][!explain|!refuse]   e.g.  dp=2   dp=2+--bucket-elems=50000   dp=2!explain
# Saves model + optimizer state under <save-layout> with mpirun (flags must
# include --optimizer model|bucket), verifies the checkpoint, then loads it
# under each <load>; '+' separates extra load flags. A plain load must check
# optimizer elements (more than zero) and find every element - model and
# optimizer - equal to its expected value. A load marked "!explain" must be
# refused before reading, with the bucket-space explanation that names the
# model-space format; one marked "!refuse" must fail (exit 2) naming the
# optimizer's bucket state. MPIRUN holds the mpirun prefix.
set -euo pipefail
ckpt=$1 scratch=$2 model=$3 save=$4 save_flags=$5
shift 5
world() {  # world size of a layout spec: tp*cp*dp*pp (ep is carved out of dp*cp)
  local tp=1 pp=1 dp=1 cp=1 kv
  IFS=, read -ra kvs <<<"$1"
  for kv in "${kvs[@]}"; do
    case ${kv%%=*} in tp) tp=${kv#*=} ;; pp) pp=${kv#*=} ;; dp) dp=${kv#*=} ;; cp) cp=${kv#*=} ;; esac
  done
  echo $((tp * pp * dp * cp))
}
rm -rf "$scratch" && mkdir -p "$scratch"
# shellcheck disable=SC2086
$MPIRUN -np "$(world "$save")" "$ckpt" save --root "$scratch" --iter 20 --model "$model" --layout "$save" $save_flags
"$ckpt" verify "$scratch" >/dev/null
for arg in "$@"; do
  explain=0 refuse=0
  [[ $arg == *'!explain' ]] && { explain=1; arg=${arg%'!explain'}; }
  [[ $arg == *'!refuse' ]] && { refuse=1; arg=${arg%'!refuse'}; }
  IFS=+ read -ra parts <<<"$arg"
  load=${parts[0]}
  rc=0
  out=$($MPIRUN -np "$(world "$load")" "$ckpt" load --root "$scratch" --layout "$load" "${parts[@]:1}" 2>&1) || rc=$?
  echo "$out" | grep -E "^load|ckpt load" | sort -u || true
  if ((refuse)); then
    ((rc == 2)) || { echo "FAILED: $save -> $arg: exit $rc, must be refused (2)"; echo "$out"; exit 1; }
    grep -qE "optimizer\.distributed\.|dp_reshardable" <<<"$out" ||
      { echo "FAILED: $save -> $arg: refused without naming the optimizer buckets"; echo "$out"; exit 1; }
    echo "refused as expected: $(grep -m1 -oE "(InvalidArgument|NotFound|FailedPrecondition): .{0,160}" <<<"$out")"
  elif ((explain)); then
    ((rc != 0)) || { echo "FAILED: $save -> $arg loaded, but bucket space must refuse it"; exit 1; }
    grep -q "bucket-space optimizer state does not match this job" <<<"$out" &&
      grep -q "save it in model space (--optimizer model)" <<<"$out" ||
      { echo "FAILED: $save -> $arg: refused without the explanation"; exit 1; }
    ! grep -q "^load  iter" <<<"$out" || { echo "FAILED: $save -> $arg: refusal came after reading"; exit 1; }
  else
    ((rc == 0)) || { echo "FAILED: $save -> $arg (exit $rc)"; exit 1; }
    grep -qE "elements checked [0-9]+ \(optimizer [1-9][0-9]*\), mismatches 0$" <<<"$out" ||
      { echo "FAILED: $save -> $arg: optimizer not checked or mismatches"; exit 1; }
  fi
done
rm -rf "$scratch"
