#!/usr/bin/env bash
# Read sharing at load (LoadOptions::share_comm, `ckpt load --share-reads`):
#   share_reads.sh <ckpt-binary> <scratch-dir>
# 1. DP4 load of a TP2 checkpoint (model replicated over DP, optimizer
#    DP-sharded): without sharing the ranks read more bytes than the shard
#    files hold; with dp/job sharing every chunk is read from disk once (total
#    read <= file bytes, read + received > read without sharing), tiny exchange
#    rounds included; every element of model and optimizer checked.
# 2. TP2 -> TP4 with job sharing: the chunks two TP ranks both need are read once.
# 3. A flipped byte in a chunk: every rank fails with the same exit code and
#    the error names the file and tensor; --fallback moves all ranks to the
#    older iteration. A deleted shard file: every rank fails naming it.
# MPIRUN holds the mpirun prefix.
set -euo pipefail
ckpt=$1 scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch"
root=$scratch/ckpt
fail() { echo "FAILED: $*"; exit 1; }
field() { python3 -c "import json,sys; print(json.loads(sys.stdin.read().strip().splitlines()[-1])['$1'])"; }
load() {  # load <np> <layout> <flags...>: prints the JSON summary line
  local np=$1 layout=$2
  shift 2
  $MPIRUN -np "$np" "$ckpt" load --root "$root" --layout "$layout" --json "$@" | grep '^{'
}
$MPIRUN -np 2 "$ckpt" save --root "$root" --iter 10 --model tiny --layout tp=2 --optimizer model --compress zstd >/dev/null
$MPIRUN -np 2 "$ckpt" save --root "$root" --iter 20 --model tiny --layout tp=2 --optimizer model --compress zstd >/dev/null
file_bytes=$(du -cb "$root"/iter_0000020/rank_*.h5 | tail -1 | cut -f1)

none=$(load 4 dp=4 --share-reads none)
[[ $(field mismatches <<<"$none") == 0 && $(field optimizer_mismatches <<<"$none") == 0 ]] || fail "dp4 none: $none"
none_bytes=$(field bytes <<<"$none")
((none_bytes > file_bytes)) || fail "dp4 without sharing read $none_bytes <= $file_bytes file bytes: no replicated reads to save"
for flags in "--share-reads dp" "--share-reads job" "--share-reads dp --share-round-mb 0"; do
  # shellcheck disable=SC2086
  out=$(load 4 dp=4 $flags)
  bytes=$(field bytes <<<"$out") got=$(field bytes_received <<<"$out") rounds=$(field share_rounds <<<"$out")
  [[ $(field mismatches <<<"$out") == 0 && $(field optimizer_mismatches <<<"$out") == 0 ]] || fail "dp4 $flags: $out"
  ((bytes <= file_bytes)) || fail "dp4 $flags read $bytes bytes > $file_bytes in the shard files (a chunk read twice)"
  ((got > 0 && bytes + got >= none_bytes)) || fail "dp4 $flags: read $bytes + received $got < $none_bytes needed"
  echo "dp4 $flags: read $bytes B (without sharing $none_bytes B, files $file_bytes B), received $got B, $rounds rounds"
done
((rounds > 1)) || fail "--share-round-mb 0 ran $rounds round(s), expected one per chunk"

tp_none=$(load 4 tp=4 --share-reads none)
tp_job=$(load 4 tp=4 --share-reads job)
[[ $(field mismatches <<<"$tp_job") == 0 && $(field optimizer_mismatches <<<"$tp_job") == 0 ]] || fail "tp4 job: $tp_job"
echo "tp2 -> tp4: read $(field bytes <<<"$tp_none") B without sharing, $(field bytes <<<"$tp_job") B with job sharing"
(($(field bytes <<<"$tp_job") <= file_bytes)) || fail "tp4 job sharing read a chunk twice"

"$ckpt" faults damage --root "$root" --iter 20 --file rank_00001.h5 --kind bitflip --chunk mid --seed 3 >/dev/null
rc=0
out=$($MPIRUN -np 4 "$ckpt" load --root "$root" --layout dp=4 --share-reads dp 2>&1) || rc=$?
echo "$out" | grep "ckpt load" | sort -u | head -4
((rc != 0)) || fail "damaged chunk loaded"
grep -q "rank_00001.h5" <<<"$out" && grep -q "sha256 mismatch" <<<"$out" || fail "damage error does not name the file: $out"
ok=$(load 4 dp=4 --share-reads dp --fallback)
[[ $(field iteration <<<"$ok") == 10 && $(field mismatches <<<"$ok") == 0 ]] || fail "fallback did not load iteration 10: $ok"
echo "damaged iter 20: every rank failed (exit $rc); --fallback loaded iteration 10 with 0 mismatches"

rm "$root"/iter_0000020/rank_00000.h5
rc=0
out=$($MPIRUN -np 4 "$ckpt" load --root "$root" --layout dp=4 --share-reads dp 2>&1) || rc=$?
((rc != 0)) && grep -q "rank_00000.h5' (rank 0) is missing" <<<"$out" || fail "missing file: exit $rc, $out"
echo "missing shard file: every rank failed (exit $rc) naming it"
rm -rf "$scratch"
