#!/usr/bin/env bash
# One command, one run, one machine: the disk and memory limits (dd with
# fsync, cold dd read, memcpy), the chunk codec table (zstd settings: ratio,
# encode/decode MB/s) and pipelined shard writes (encode workers 0/1/2),
# ckpt save (default workers and serial)/load/reshard raw and compressed,
# async-save blocking time, peers (torch.save/torch.load per rank, h5py) on the
# same arrays, scaling over ranks and state size, ckpt convert (each direction
# vs reading the same bytes, peak RSS vs model size), and the 70B/405B plan
# simulation. Prints a table of MB/s and ratios and writes bench/out/*.png.
#   bench/run.sh [build-dir]     (CKPT_BENCH_DIR: scratch, default <build>/benchdata)
set -euo pipefail
BUILD=$(realpath "${1:-build}")
HERE=$(cd "$(dirname "$0")" && pwd)
CKPT=$BUILD/cli/ckpt
BENCH=$BUILD/bench/ckpt_bench
DIR=${CKPT_BENCH_DIR:-$BUILD/benchdata}
OUTDIR=$HERE/out
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader)
RANKS=${CKPT_BENCH_RANKS:-2}
rm -rf "$DIR" && mkdir -p "$DIR" "$OUTDIR"
R=$OUTDIR/results.jsonl
: >"$R"
cold() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null && echo true || echo false; }
emit() { echo "$1" | tee -a "$R"; }
rate() {  # rate <op> <bytes> <seconds> [extra json]
  emit "{\"op\":\"$1\",\"bytes\":$2,\"seconds\":$3,\"mb_per_s\":$(awk -v b="$2" -v s="$3" 'BEGIN{print b/1e6/s}')${4:+,$4}}"
}
secs() { awk -v a="$1" -v b="$2" 'BEGIN{print b-a}'; }

echo "== baselines"
# The disk limit is the better of one writer and $RANKS concurrent writers (as many as ckpt uses).
t0=$(date +%s.%N); dd if=/dev/zero of="$DIR/dd.bin" bs=4M count=256 conv=fsync status=none; t1=$(date +%s.%N)
rate "dd write+fsync, 1 writer" 1073741824 "$(secs "$t0" "$t1")"
t0=$(date +%s.%N)
for i in $(seq "$RANKS"); do dd if=/dev/zero of="$DIR/dd$i.bin" bs=4M count=$((256 / RANKS)) conv=fsync status=none & done
wait; t1=$(date +%s.%N); rm -f "$DIR"/dd[0-9]*.bin
rate "dd write+fsync, $RANKS writers" $((256 / RANKS * RANKS * 4194304)) "$(secs "$t0" "$t1")"
c=$(cold); t0=$(date +%s.%N); dd if="$DIR/dd.bin" of=/dev/null bs=4M status=none; t1=$(date +%s.%N)
rate "dd read" 1073741824 "$(secs "$t0" "$t1")" "\"cold\":$c"
rm -f "$DIR/dd.bin"
"$BENCH" memcpy 1024 | tee -a "$R"
echo "== chunk codec: zstd settings on bf16 normal(0,0.02), 1 thread (table on stderr)"
"$BENCH" codec 256 | tee -a "$R"
echo "== pipelined shard write (512 MiB bf16): encode workers 0 (serial) / 1 / 2"
for comp in none zstd; do for t in 0 1 2; do "$BENCH" shard 512 "$t" "$comp" "$DIR" | tee -a "$R"; done; done
rm -f "$DIR"/shard_*.h5

run_save() {  # run_save <name> <np> <layout> <model> [flags]
  local name=$1 np=$2 layout=$3 model=$4; shift 4
  "${MPIRUN[@]}" -np "$np" "$CKPT" save --root "$DIR/$name" --iter 1 --model "$model" --layout "$layout" --json "$@" |
    /usr/bin/python3 -c "import json,sys; j=json.loads(sys.stdin.read()); j['op']='$name'; print(json.dumps(j))" | tee -a "$R"
}
run_load() {  # run_load <name> <root> <np> <layout> [flags]
  local name=$1 root=$2 np=$3 layout=$4 c
  shift 4
  c=$(cold)
  "${MPIRUN[@]}" -np "$np" "$CKPT" load --root "$root" --layout "$layout" --json --no-check "$@" |
    /usr/bin/python3 -c "import json,sys; j=json.loads(sys.stdin.read()); j['op']='$name'; j['cold']='$c'=='true'; print(json.dumps(j))" | tee -a "$R"
}

echo "== ckpt on the demo state (~1 GB bf16) at TP$RANKS"
run_save "ckpt save raw" "$RANKS" "tp=$RANKS" demo
run_save "ckpt save zstd" "$RANKS" "tp=$RANKS" demo --compress zstd
run_save "ckpt save raw serial" "$RANKS" "tp=$RANKS" demo --encode-threads 0
run_save "ckpt save zstd serial" "$RANKS" "tp=$RANKS" demo --compress zstd --encode-threads 0
run_load "ckpt load raw" "$DIR/ckpt save raw" "$RANKS" "tp=$RANKS"
run_load "ckpt load zstd" "$DIR/ckpt save zstd" "$RANKS" "tp=$RANKS"
run_load "ckpt load+reshard TP$RANKS->TP1" "$DIR/ckpt save raw" 1 tp=1
# DP replicas: every rank needs the whole model; read sharing reads it once.
run_load "ckpt load+reshard TP$RANKS->DP$RANKS share none" "$DIR/ckpt save raw" "$RANKS" "dp=$RANKS" --share-reads none
run_load "ckpt load+reshard TP$RANKS->DP$RANKS share dp" "$DIR/ckpt save raw" "$RANKS" "dp=$RANKS" --share-reads dp
t0=$(date +%s.%N); "$CKPT" reshard "$DIR/ckpt save raw" "$DIR/resharded" --to tp=1 >/dev/null; t1=$(date +%s.%N)
rate "ckpt reshard offline TP$RANKS->TP1" "$(du -sb "$DIR/resharded" | cut -f1)" "$(secs "$t0" "$t1")"
echo "== async save (blocking part vs memcpy of the rank's state)"
"${MPIRUN[@]}" -np "$RANKS" "$BENCH" async demo "tp=$RANKS" "$DIR/async" | tee -a "$R"
echo "== peers on the same arrays"
/usr/bin/python3 "$HERE/peers.py" "$DIR/ckpt save raw/iter_0000001" "$DIR/peers" "$R"
echo "== scaling: ranks and state size"
for np in 1 2 4; do run_save "scale ranks $np" "$np" "tp=$np" demo; rm -rf "$DIR/scale ranks $np"; done
for layers in 1 2 4 8; do run_save "scale layers $layers" 2 tp=2 "demo:num_layers=$layers"; rm -rf "$DIR/scale layers $layers"; done
echo "== ckpt convert (HF safetensors <-> ckpt, torch.save) on a ~1 GB model vs reading its bytes"
/usr/bin/python3 "$HERE/convert_bench.py" "$CKPT" "$DIR/convert" "$R"
echo "== plan simulation (no data)"
for spec in "llama70b tp=8,pp=16,dp=64 tp=8,pp=8,dp=128" "llama405b tp=8,pp=14,dp=146 tp=8,pp=7,dp=292"; do
  set -- $spec
  /usr/bin/time -f '%e %M' -o "$DIR/time.txt" "$CKPT" plan --simulate "$1" --from "$2" --to "$3" --json >"$DIR/plan.json" || true
  /usr/bin/python3 - "$DIR/plan.json" "$DIR/time.txt" "$1" "$R" <<'PY'
import json, sys
try:
    j = json.load(open(sys.argv[1]))
except Exception:
    sys.exit(0)
t, kb = open(sys.argv[2]).read().split()
row = {"op": "plan " + sys.argv[3], "ranks": j["ranks"], "seconds": float(t), "max_rss_mb": int(kb) / 1024,
       "bytes_read_total": j["bytes_read_total"], "bytes_read_total_share_dp": j["bytes_read_total_share_dp"],
       "checkpoint_bytes": j["checkpoint_bytes"], "from": j["from"], "to": j["to"]}
print(json.dumps(row))
open(sys.argv[4], "a").write(json.dumps(row) + "\n")
PY
done
/usr/bin/python3 "$HERE/report.py" "$R" "$OUTDIR"
rm -rf "$DIR"
