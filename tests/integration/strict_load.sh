#!/usr/bin/env bash
# `ckpt load --strict`: an 8-layer checkpoint loaded as a 4-layer model fails
# by default (unexpected keys, exit 2, naming a layer 4+ key, before the
# element check); --strict missing/none load it and print the unexpected
# keys; the whole model loads with the default. A 4-layer checkpoint loaded
# as 8 layers fails (missing keys) unless --strict none/unexpected, where
# the untouched layers show up as mismatches (exit 1).
set -euo pipefail
ckpt=$1 s=$2
rm -rf "$s" && mkdir -p "$s"
fail() { echo "FAILED: $*"; echo "$out"; exit 1; }
"$ckpt" save --root "$s/l8" --iter 1 --model tiny:num_layers=8 --layout tp=1 >/dev/null
"$ckpt" save --root "$s/l4" --iter 1 --model tiny:num_layers=4 --layout tp=1 >/dev/null
run() { rc=0; out=$("$ckpt" load "$@" 2>&1) || rc=$?; }

run --root "$s/l8" --model :num_layers=4
((rc == 2)) || fail "8 layers as 4: exit $rc, want 2"
grep -q "FailedPrecondition: .*key(s) no rank requested (strict all.*'decoder\.layers\.[4-7]\." <<<"$out" || fail "8 as 4: no unexpected-key error"
echo "default strict: $(grep -m1 -o "FailedPrecondition: .\{0,120\}" <<<"$out")"
for mode in missing none; do
  run --root "$s/l8" --model :num_layers=4 --strict $mode
  ((rc == 0)) || fail "8 as 4 --strict $mode: exit $rc"
  grep -q "^load  unexpected key (strict $mode): decoder\.layers\.7\." <<<"$out" || fail "--strict $mode did not print unexpected keys"
  grep -q "mismatches 0" <<<"$out" || fail "--strict $mode: loaded layers differ"
done
run --root "$s/l8"
((rc == 0)) && ! grep -q "unexpected key" <<<"$out" || fail "the whole 8-layer model did not load cleanly"

run --root "$s/l4" --model :num_layers=8
((rc == 2)) && grep -q "NotFound: .*requested key(s) missing (strict all)" <<<"$out" || fail "4 as 8: exit $rc, want 2 naming missing keys"
run --root "$s/l4" --model :num_layers=8 --strict unexpected
((rc == 1)) && grep -q "^load  missing key (strict unexpected): decoder\.layers\.7\." <<<"$out" || fail "4 as 8 --strict unexpected: exit $rc, want 1 with missing keys printed"
run --root "$s/l4" --strict bogus
((rc != 0)) || fail "--strict bogus accepted"
echo "strict_load: all cases as expected"
rm -rf "$s"
