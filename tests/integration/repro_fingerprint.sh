#!/usr/bin/env bash
# Layout-invariant fingerprint with real jobs: one state saved at TP4xPP2 and at
# TP2xPP1 fingerprints identically - for trained state (ckpt train, 3 steps)
# and for the expected-value state of ckpt save, also after an offline reshard.
# (The 1-ulp negative is in tests/unit/protocol/fingerprint_test.cc.) Reports timing.
set -euo pipefail
ckpt=$1 scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch"
# shellcheck source=tests/integration/repro_common.sh
source "$(dirname "$0")/repro_common.sh"

train tp=4,pp=2 "$scratch/t_tp4pp2" --steps 3 >/dev/null
train tp=2 "$scratch/t_tp2" --steps 3 >/dev/null
same "$scratch/t_tp4pp2" "$scratch/t_tp2" "trained state saved at TP4xPP2 and TP2xPP1"
$MPIRUN -np 8 "$ckpt" save --root "$scratch/s_tp4pp2" --iter 1 --model tiny --layout tp=4,pp=2 >/dev/null
$MPIRUN -np 2 "$ckpt" save --root "$scratch/s_tp2" --iter 1 --model tiny --layout tp=2 --compress zstd >/dev/null
same "$scratch/s_tp4pp2" "$scratch/s_tp2" "ckpt save state at TP4xPP2 and TP2xPP1 (zstd)"
# ckpt reshard rewrites the model tensors (only): use the model-only checkpoint.
"$ckpt" reshard "$scratch/s_tp4pp2" "$scratch/s_resharded" --to tp=1,pp=4 >/dev/null
same "$scratch/s_tp4pp2" "$scratch/s_resharded" "offline reshard TP4xPP2 -> TP1xPP4"
[[ $(digest "$scratch/t_tp2") != $(digest "$scratch/s_tp2") ]] || { echo "FAILED: different states, same fingerprint"; exit 1; }
out=$("$ckpt" fingerprint --per-tensor "$scratch/t_tp4pp2")
sed -n 2p <<<"$out"
grep -q "embedding.word_embeddings.weight bf16 \[1100, 64\] (saved \[1536, 64\])" <<<"$out"
rm -rf "$scratch"
echo "repro fingerprint: PASSED"
