#!/usr/bin/env bash
# `ckpt convert` end to end with real processes:
#  1. ckpt -> HF -> ckpt: a TP2xPP2 job's state (tiny preset: Llama-shaped,
#     vocab 1100 padded per TP) exported to HF and imported again at the same
#     and at another layout has the same `ckpt fingerprint`, and a TP4xPP2 job
#     loading the re-imported checkpoint finds every element equal to its
#     expected value;
#  2. HF -> ckpt (TP4xPP2, MCore keys: stacked layers + _extra_state) -> HF
#     gives safetensors files identical byte for byte to the first export;
#  3. MCore keys both ways: a job saving stacked keys + _extra_state exports
#     to HF; the --mcore import at TP4xPP2 has its fingerprint, and a job
#     asking for _extra_state (strict) loads it with every element right, also
#     after `ckpt reshard`; a checkpoint without them is refused, naming the object;
#  4. bad input exits 2 naming the file and tensor (missing shard file).
#   convert.sh <ckpt-binary> <scratch-dir>      (MPIRUN holds the mpirun prefix)
set -euo pipefail
ckpt=$1 s=$2
rm -rf "$s" && mkdir -p "$s"
fp() { "$ckpt" fingerprint "$1" | sed -n 1p; }  # sed reads it all: no SIGPIPE under pipefail
$MPIRUN -np 4 "$ckpt" save --root "$s/a" --iter 5 --model tiny --layout tp=2,pp=2 >/dev/null
"$ckpt" convert "$s/a" "$s/hf" --to hf
ls "$s/hf"
"$ckpt" convert "$s/hf" "$s/b" --to ckpt --layout tp=2,pp=2
"$ckpt" convert "$s/hf" "$s/c" --to ckpt --layout tp=4,pp=2 --compress zstd
fa=$(fp "$s/a") fb=$(fp "$s/b") fc=$(fp "$s/c")
echo "a: $fa"; echo "b: $fb"; echo "c: $fc"
[[ $fa == "$fb" && $fa == "$fc" ]] || { echo "FAILED: ckpt -> HF -> ckpt changed the fingerprint"; exit 1; }
out=$($MPIRUN -np 8 "$ckpt" load --root "$s/c" --layout tp=4,pp=2)
echo "$out"
grep -q "mismatches 0" <<<"$out" || { echo "FAILED: the re-imported state differs"; exit 1; }

"$ckpt" convert "$s/hf" "$s/m" --to ckpt --layout tp=4,pp=2 --mcore
inspect=$("$ckpt" inspect "$s/m")  # (not piped into grep -q: pipefail + SIGPIPE)
grep -q "decoder.layers.self_attention.linear_qkv.weight" <<<"$inspect" ||
  { echo "FAILED: --mcore did not stack the layer keys"; exit 1; }
"$ckpt" convert "$s/m" "$s/hf2" --to hf
for f in "$s"/hf/*.safetensors; do
  cmp "$f" "$s/hf2/$(basename "$f")" || { echo "FAILED: HF -> ckpt -> HF changed $(basename "$f")"; exit 1; }
done
echo "HF -> ckpt (tp=4,pp=2, --mcore) -> HF: safetensors files identical"

$MPIRUN -np 2 "$ckpt" save --root "$s/am" --iter 5 --model tiny:stack_layers=true,extra_state=true --layout tp=2 >/dev/null
"$ckpt" convert "$s/am" "$s/hfm" --to hf
"$ckpt" convert "$s/hfm" "$s/mm" --to ckpt --layout tp=4,pp=2 --mcore
[[ $(fp "$s/am") == $(fp "$s/mm") ]] || { echo "FAILED: stacked ckpt -> HF -> --mcore ckpt changed the fingerprint"; exit 1; }
out=$($MPIRUN -np 8 "$ckpt" load --root "$s/mm" --layout tp=4,pp=2)
echo "$out"
grep -q "mismatches 0" <<<"$out" || { echo "FAILED: loading the --mcore import"; exit 1; }
"$ckpt" reshard "$s/mm" "$s/mm1" --to tp=1 >/dev/null  # stacked keys and extra state carried
out=$("$ckpt" load --root "$s/mm1" --layout tp=1)
grep -q "mismatches 0" <<<"$out" || { echo "FAILED: offline reshard of the --mcore import"; echo "$out"; exit 1; }
rc=0
out=$($MPIRUN -np 2 "$ckpt" load --root "$s/b" --layout tp=2 --model :extra_state=true 2>&1) || rc=$?
((rc == 2)) && grep -q "_extra_state' cell 0 is not in checkpoint" <<<"$out" ||
  { echo "FAILED: a strict load without _extra_state was not refused (rc $rc)"; echo "$out"; exit 1; }

mkdir -p "$s/bad" && cp "$s/hf/config.json" "$s/bad/"
"$ckpt" convert "$s/a" "$s/split" --to hf --max-shard-mb 0.2
cp "$s/split"/* "$s/bad/" && rm "$s/bad/model-00002-of-"*.safetensors
rc=0
"$ckpt" convert "$s/bad" "$s/never" --to ckpt --layout tp=2 2>"$s/err" || rc=$?
cat "$s/err"
((rc == 2)) && grep -q "maps tensor 'model\.[a-z_.0-9]*' (and [0-9]* more) to shard file '.*model-00002-of-0000[0-9].safetensors', which does not exist" "$s/err" ||
  { echo "FAILED: a missing shard file was not named (rc $rc)"; exit 1; }
[[ ! -e $s/never/iter_0000000 ]] || { echo "FAILED: a failed conversion left a checkpoint"; exit 1; }
rm -rf "$s"
echo "convert: PASSED"
