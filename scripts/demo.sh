#!/usr/bin/env bash
# The main scenario: a ~1 GB Megatron GPT state saved at TP4 by a 4-rank
# mpirun job, verified, then loaded by a TP2 job and a TP1 job that check
# every element. Prints one table; every number is measured in this run.
#   scripts/demo.sh [build-dir]     (CKPT_DEMO_DIR, CKPT_DEMO_MODEL override)
set -euo pipefail
BUILD=${1:-build}
CKPT=$(realpath "$BUILD/cli/ckpt")
DIR=${CKPT_DEMO_DIR:-$(realpath "$BUILD")/demo}
MODEL=${CKPT_DEMO_MODEL:-demo}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader)
rm -rf "$DIR" && mkdir -p "$DIR"
OUT=$DIR/results.jsonl
: >"$OUT"

echo "== disk baseline: dd 1 GiB with fsync"
dd_out=$(dd if=/dev/zero of="$DIR/dd.bin" bs=4M count=256 conv=fsync 2>&1 | tail -1)
rm -f "$DIR/dd.bin"
echo "$dd_out"
dd_mbps=$(awk '{for (i = 1; i < NF; i++) if ($(i+1) ~ /^s,?$/) s = $i} END {print 1073.741824 / s}' <<<"${dd_out//,/ }")
echo "{\"op\":\"dd\",\"mb_per_s\":$dd_mbps}" >>"$OUT"

echo "== save at TP4 (4 ranks)"
"${MPIRUN[@]}" -np 4 "$CKPT" save --root "$DIR/ckpt" --iter 100 --model "$MODEL" --layout tp=4 --json | tee -a "$OUT"
echo "== verify"
vstart=$(date +%s.%N)
"$CKPT" verify --json "$DIR/ckpt" >"$DIR/verify.json"
/usr/bin/python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(json.dumps({'op':'verify','bytes':j['bytes'],'seconds':j['seconds'],'mb_per_s':j['mb_per_s'],'ok':j['ok']}))" "$DIR/verify.json" | tee -a "$OUT"
echo "== load at TP2 (2 ranks) and TP1 (1 rank), every element checked"
"${MPIRUN[@]}" -np 2 "$CKPT" load --root "$DIR/ckpt" --layout tp=2 --json | tee -a "$OUT"
"${MPIRUN[@]}" -np 1 "$CKPT" load --root "$DIR/ckpt" --layout tp=1 --json | tee -a "$OUT"

/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
dd = next(r for r in rows if r["op"] == "dd")["mb_per_s"]
print()
print(f"| step | layout | ranks | MB | seconds | MB/s | vs dd+fsync | elements checked | mismatches |")
print(f"|---|---|---|---|---|---|---|---|---|")
print(f"| dd 1 GiB conv=fsync | - | 1 | 1073.7 | {1073.741824/dd:.3f} | {dd:.0f} | 1.00x | - | - |")
bad = 0
for r in rows:
    if r["op"] == "save":
        print(f"| save | {r['layout'].split(',cp')[0]} | {r['ranks']} | {r['bytes']/1e6:.1f} | {r['seconds']:.3f} | {r['mb_per_s']:.0f} | {r['mb_per_s']/dd:.2f}x | - | - |")
        print(f"|  bytes per rank | max {r['max_rank_bytes']/1e6:.1f} MB | min {r['min_rank_bytes']/1e6:.1f} MB | | | | | | |")
    elif r["op"] == "verify":
        print(f"| verify (re-hash all) | - | 1 | {r['bytes']/1e6:.1f} | {r['seconds']:.3f} | {r['mb_per_s']:.0f} | {r['mb_per_s']/dd:.2f}x | - | {'ok' if r['ok'] else 'BAD'} |")
        bad += 0 if r["ok"] else 1
    elif r["op"] == "load":
        print(f"| load (reshard) | {r['layout'].split(',cp')[0]} | {r['ranks']} | {r['bytes']/1e6:.1f} | {r['seconds']:.3f} | {r['mb_per_s']:.0f} | {r['mb_per_s']/dd:.2f}x | {r['elements_checked']:,} | {r['mismatches']} |")
        bad += r["mismatches"]
print()
print("demo:", "PASSED (every element of every load equals its expected value)" if bad == 0 else "FAILED")
sys.exit(0 if bad == 0 else 1)
PY
rm -rf "$DIR/ckpt"
