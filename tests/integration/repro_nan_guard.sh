#!/usr/bin/env bash
# NaN/Inf guard: a NaN gradient at iteration 7 makes the save at 10 refuse to
# commit, naming rank, tensor and index; iteration 5 stays latest and resumes.
# With --nonfinite warn the save commits and warns.
set -euo pipefail
ckpt=$1 scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch"
# shellcheck source=tests/integration/repro_common.sh
source "$(dirname "$0")/repro_common.sh"

rc=0
train tp=4 "$scratch/refuse" --steps 10 --save-every 5 --inject-nan 7 >"$scratch/out" 2>"$scratch/err" || rc=$?
[[ $rc != 0 ]] || { echo "FAILED: the save of non-finite state succeeded"; exit 1; }
# Every rank exits 1 (check failed): the refusal crosses ranks as a typed phase.
[[ $rc == 1 ]] || { cat "$scratch/err"; echo "FAILED: refused save exited $rc, want 1"; exit 1; }
# fc2 [64, 128] is split on axis 1 over TP4: global element 100 (row 0, column 100) is rank 3's local 4.
grep -q "refusing to commit non-finite state: rank 3: tensor '.*decoder.layers.0.mlp.linear_fc2.weight' holds NaN at local flat index 4" "$scratch/err" ||
  { cat "$scratch/err"; echo "FAILED: refusal does not name rank, tensor and index"; exit 1; }
[[ $(cat "$scratch/refuse/latest_checkpointed_iteration.txt") == 5 ]] || { echo "FAILED: tracker moved"; exit 1; }
[[ ! -e "$scratch/refuse/iter_0000010" ]] || { echo "FAILED: iteration 10 committed"; exit 1; }
"$ckpt" verify "$scratch/refuse" >/dev/null
# The refused attempt may leave an invisible .iter_0000010.tmp-* dir; the next save cleans it up.
train tp=4 "$scratch/refuse" --steps 10 --resume >/dev/null
[[ $(cat "$scratch/refuse/latest_checkpointed_iteration.txt") == 10 ]]
if ls -a "$scratch/refuse" | grep -q '\.tmp-'; then echo "FAILED: stale tmp dir survived the next save"; exit 1; fi
echo "ok: non-finite save refused, iteration 5 stayed latest and resumed"

train tp=4 "$scratch/warn" --steps 10 --save-every 5 --inject-nan 7 --nonfinite warn >/dev/null 2>"$scratch/err"
grep -q "ckpt warning: rank 3: tensor 'decoder.layers.0.mlp.linear_fc2.weight' holds NaN" "$scratch/err"
[[ $(cat "$scratch/warn/latest_checkpointed_iteration.txt") == 10 ]]
echo "ok: --nonfinite warn commits with a warning"
rm -rf "$scratch"
echo "repro nan guard: PASSED"
