#!/usr/bin/env bash
# Helpers shared by the repro_*.sh reproducibility tests (sourced, not run).
# Needs: $ckpt (the binary), $scratch, $MPIRUN (mpirun prefix from CMake).
set -euo pipefail

world() {  # world size of a layout spec: tp*cp*dp*pp
  local tp=1 pp=1 dp=1 cp=1 kv
  IFS=, read -ra kvs <<<"$1"
  for kv in "${kvs[@]}"; do
    case ${kv%%=*} in tp) tp=${kv#*=} ;; pp) pp=${kv#*=} ;; dp) dp=${kv#*=} ;; cp) cp=${kv#*=} ;; esac
  done
  echo $((tp * pp * dp * cp))
}

train() {  # train <layout> <root> [flags...]: one mpirun job of `ckpt train`
  local layout=$1 root=$2
  shift 2
  # shellcheck disable=SC2086
  $MPIRUN -np "$(world "$layout")" "$ckpt" train --layout "$layout" --root "$root" --model tiny "$@"
}

# train to --steps, but save at <at> and SIGKILL the job there; the kill must happen.
train_and_kill() {  # train_and_kill <layout> <root> <at> <steps> [flags...]
  local layout=$1 root=$2 at=$3 steps=$4
  shift 4
  if train "$layout" "$root" --steps "$steps" --save-at "$at" --kill-after-save "$@" >"$root.kill.log" 2>&1; then
    echo "FAILED: the job was not killed"; cat "$root.kill.log"; exit 1
  fi
  grep -q "killing the job after the save at iteration $at" "$root.kill.log" || { cat "$root.kill.log"; exit 1; }
  [[ $(cat "$root/latest_checkpointed_iteration.txt") == "$at" ]] || { echo "FAILED: tracker is not $at"; exit 1; }
}

digest() { "$ckpt" fingerprint "$1" | awk '/^fingerprint/ {print $2}'; }

same() {  # same <a> <b> <what>: bitwise equal (fingerprint and diff agree)
  local da db
  da=$(digest "$1") db=$(digest "$2")
  "$ckpt" diff "$1" "$2" >"$scratch/diff.out" || { cat "$scratch/diff.out"; echo "FAILED: $3 (diff)"; exit 1; }
  [[ $da == "$db" ]] || { echo "FAILED: $3 (fingerprints $da vs $db)"; exit 1; }
  echo "ok: $3 (fingerprint ${da:0:16})"
}

differ() {  # differ <a> <b> <what>: not bitwise equal; exit code 1 from diff, different fingerprints
  local rc=0
  "$ckpt" diff "$1" "$2" >"$scratch/diff.out" || rc=$?
  [[ $rc == 1 ]] || { cat "$scratch/diff.out"; echo "FAILED: $3 (diff exit $rc, want 1)"; exit 1; }
  [[ $(digest "$1") != "$(digest "$2")" ]] || { echo "FAILED: $3 (equal fingerprints)"; exit 1; }
  echo "ok: $3 differs ($(tail -1 "$scratch/diff.out"))"
}
