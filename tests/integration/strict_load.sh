#!/usr/bin/env bash
# `ckpt load --strict`: an 8-layer checkpoint loaded as a 4-layer model fails
# by default (unexpected keys, exit 2, naming a layer 4+ key, before the
# element check); --strict missing/none load it and print the unexpected
# keys; the whole model loads with the default. A 4-layer checkpoint loaded
# as 8 layers fails (missing keys) unless --strict none/unexpected, where
# the untouched layers show up as mismatches (exit 1). The JSON lists what was
# loaded and skipped; --fallback warns; a bad root or a flag typo gets a hint.
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

# What was loaded and skipped is in the JSON (issue 29.2).
run --root "$s/l8" --model :num_layers=4 --strict missing --json
((rc == 0)) && grep -q '"unexpected_keys":\["decoder\.layers\.4\.' <<<"$out" && grep -q '"missing_keys":\[\]' <<<"$out" ||
  fail "--json does not list the unexpected keys"
# A fallback load warns on stderr and says in the JSON which iteration it loaded and why.
"$ckpt" save --root "$s/l8" --iter 2 --model tiny:num_layers=8 --layout tp=1 >/dev/null
for f in "$s"/l8/iter_0000002/*.h5; do truncate -s 100 "$f"; done
rc=0; out=$("$ckpt" load --root "$s/l8" --fallback --json 2>"$s/err") || rc=$?
err=$(cat "$s/err")
((rc == 0)) && grep -q '"iteration":1' <<<"$out" && grep -q '"skipped":\["iter_0000002' <<<"$out" ||
  fail "--fallback --json: exit $rc, want iteration 1 and iter_0000002 skipped"
grep -q "warning: loaded iteration 1, not the latest: skipped iter_0000002" <<<"$err" || { out=$err; fail "--fallback: no warning"; }
# Errors a user can act on (issue 29.6): a root that is an iteration directory or a file; a flag typo.
run --root "$s/l8/iter_0000001/"
((rc == 2)) && grep -q "is an iteration directory: pass its parent '$s/l8' as the root" <<<"$out" || fail "iteration dir root: no hint"
run --root "$s/l8/iter_0000001/manifest.json"
((rc == 2)) && grep -q "is a file: the root is the directory holding the iter_N directories" <<<"$out" || fail "file root: no hint"
run --root "$s/l8" --strickt none
((rc == 2)) && grep -q "did you mean --strict?" <<<"$out" || fail "--strickt: no suggestion"
rc=0; out=$("$ckpt" train --root "$s/t" --keep-lst 2 2>&1) || rc=$?
((rc == 2)) && grep -q "did you mean --keep-last?" <<<"$out" || fail "train --keep-lst: no suggestion"
echo "strict_load: all cases as expected"
rm -rf "$s"
