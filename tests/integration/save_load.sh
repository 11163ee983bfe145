#!/usr/bin/env bash
# One save/load reshard case with real processes:
#   save_load.sh <ckpt-binary> <scratch-dir> <model-spec> <save-layout> <load-layout>[@<model>][!bad] ...
# A load marked "!bad" is a negative control: it must report mismatches, all
# of them in SwiGLU fc1 (the test fails if the mechanism stops mattering).
# Saves the model state under <save-layout> with mpirun, then loads it under
# each <load-layout> and requires every element to equal its expected value.
# Extra save flags can be passed in SAVE_FLAGS; MPIRUN holds the mpirun prefix.
set -euo pipefail
ckpt=$1 scratch=$2 model=$3 save=$4
shift 4
world() {  # world size of a layout spec: tp*cp*dp*pp
  local tp=1 pp=1 dp=1 cp=1 kv
  IFS=, read -ra kvs <<<"$1"
  for kv in "${kvs[@]}"; do
    case ${kv%%=*} in tp) tp=${kv#*=} ;; pp) pp=${kv#*=} ;; dp) dp=${kv#*=} ;; cp) cp=${kv#*=} ;; esac
  done
  echo $((tp * pp * dp * cp))
}
rm -rf "$scratch" && mkdir -p "$scratch"
# shellcheck disable=SC2086
$MPIRUN -np "$(world "$save")" "$ckpt" save --root "$scratch" --iter 10 --model "$model" --layout "$save" ${SAVE_FLAGS:-}
"$ckpt" verify "$scratch" >/dev/null
for arg in "$@"; do
  expect_bad=0
  [[ $arg == *'!bad' ]] && { expect_bad=1; arg=${arg%'!bad'}; }
  load=${arg%%@*} lmodel=()
  [[ $arg == *@* ]] && lmodel=(--model "${arg#*@}")
  out=$($MPIRUN -np "$(world "$load")" "$ckpt" load --root "$scratch" --layout "$load" "${lmodel[@]}" ${LOAD_FLAGS:-} 2>&1) || true
  echo "$out" | grep -E "^load|ckpt load" || true
  if ((expect_bad)); then
    grep -qE "mismatches [1-9][0-9]* first at decoder.layers.[0-9]+.mlp.linear_fc1.weight" <<<"$out" ||
      { echo "FAILED: negative control $save -> $load shows no fc1 mismatch"; exit 1; }
  else
    grep -q "mismatches 0" <<<"$out" || { echo "FAILED: $save -> $load"; exit 1; }
  fi
done
rm -rf "$scratch"
