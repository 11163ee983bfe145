#!/usr/bin/env bash
# title: 多 rank 原子提交：任意时刻崩溃只见旧或新
# question: seeds/level8/M115.md
# `ckpt faults run` saves iteration 10, traces every IO operation of the save
# of iteration 20 on every rank, then replays it once per boundary x rank with
# the rank crashing there (_exit, and SIGKILL), recovers with a load under
# another layout and checks: old (10) or new (20) bit for bit, never torn, never
# an acknowledged commit lost. Then the tracker is emptied (what a crash inside
# a plain open/truncate/write of latest_checkpointed_iteration.txt leaves) and
# loaded with and without --fallback.
# Negative control: what the crashed saves left on disk. Without the tmp dir +
# vote + manifest + rename protocol (MCore writes iter_N/ in place) each of
# these partial directories would be a visible, torn iter_0000020.
# shellcheck source=lib.sh
source "${SCENARIO_LIB:-$(dirname "$0")/lib.sh}"
LAYOUT=tp=2 VARIANTS=crash,sigkill  # cost: one mpirun per boundary and variant
((REDUCED)) && VARIANTS=crash
W=$SCRATCH/campaign

must campaign "$CKPT" faults run --work "$W" --layout $LAYOUT --model tiny --variants $VARIANTS \
  --mpirun "$MPIRUN" --quiet --keep --json "$SCRATCH/report.out"

# Empty tracker on a copy of a recovered "new" root.
NEWROOT=$(dirname "$(ls -d "$W"/runs/*/*/root/iter_0000020 | head -n1)")
cp -r "$NEWROOT" "$SCRATCH/empty_tracker"
: >"$SCRATCH/empty_tracker/latest_checkpointed_iteration.txt"
run_to et_load mpi tp=1 load --root "$SCRATCH/empty_tracker" --json
# --no-check: the campaign's oracle values (keyed by iteration) are not `ckpt
# load`'s expected pattern; which iteration loads, hash-checked, is the point.
run_to et_fallback mpi tp=1 load --root "$SCRATCH/empty_tracker" --fallback --no-check --json

py <<'EOF'
import glob
rep = J("report")
W = os.path.join(S, "campaign")
v = {x["variant"]: x for x in rep["variants"]}
# A complete iteration 20 (from a recovered "new" run): its file names and sizes.
new_dirs = sorted(glob.glob(os.path.join(W, "runs", "*", "*", "root", "iter_0000020")))
final = {os.path.basename(p): os.path.getsize(p) for p in glob.glob(os.path.join(new_dirs[0], "*"))}
partial = partial_files = 0
bytes_frac = []
runs = glob.glob(os.path.join(W, "runs", "*", "*"))
for run in runs:
    for tmp in glob.glob(os.path.join(run, "root", ".iter_0000020.tmp-*")):
        names = {os.path.basename(p): os.path.getsize(p) for p in glob.glob(os.path.join(tmp, "*"))}
        complete = all(names.get(n, -1) == s for n, s in final.items())
        if not complete:
            partial += 1
            partial_files += sum(1 for n, s in names.items() if s != final.get(n, -2))
            bytes_frac.append(sum(min(s, final.get(n, 0)) for n, s in names.items()) / sum(final.values()))
totals = {k: sum(x[k] for x in rep["variants"]) for k in ("runs", "old", "new", "error", "torn", "lost", "hang", "missed")}
etf = J("et_fallback") if RC("et_fallback") == 0 else {}
n = {
    "world": rep["world"], "boundaries": rep["boundaries"], "traced_ops_rank0": rep["traced_ops"][0],
    "runs": totals["runs"], "old": totals["old"], "new": totals["new"], "error": totals["error"],
    "torn": totals["torn"], "lost": totals["lost"], "hang": totals["hang"], "violations": rep["violations"],
    "campaign_s": round(rep["seconds"], 1),
    "empty_tracker_rc": RC("et_load"),
    "empty_tracker_fallback_rc": RC("et_fallback"), "empty_tracker_fallback_iter": etf.get("iteration", -1),
}
nc = {"crash_runs": totals["runs"], "partial_iter20_dirs": partial, "partial_files": partial_files,
      "median_bytes_fraction": round(sorted(bytes_frac)[len(bytes_frac) // 2], 2) if bytes_frac else 0.0}
checks = [
    ("every crash run recovers old or new bit for bit (torn = lost = hang = 0)",
     totals["torn"] == 0 and totals["lost"] == 0 and totals["hang"] == 0 and totals["missed"] == 0
     and rep["violations"] == 0),
    ("both outcomes occur (the crash points span the commit)", totals["old"] > 0 and totals["new"] > 0),
    ("the traced IO sequence is stable (replay is meaningful)", rep["trace_stable"]),
    ("empty tracker: plain load fails loudly (non-zero exit, names the tracker)",
     RC("et_load") != 0 and "tracker" in TXT("et_load")),
    ("empty tracker + --fallback: the newest committed iteration (20) loads, hashes checked",
     RC("et_fallback") == 0 and etf.get("iteration") == 20),
]
emit("多 rank 原子提交：任意时刻崩溃只见旧或新",
     f"faults run: {rep['layout']} ({rep['world']} ranks), tiny, save 10 → 20, {'+'.join(v)} at every IO boundary of every rank, recovery at {rep['recover_layout']}",
     n, checks,
     "每个 rank 先写 .iter_N.tmp-* 并 fsync，投票后由 rank 0 写自哈希 manifest、rename 成 iter_N、再原子更新 tracker；"
     "在任何一个 IO 边界崩溃，恢复到的都是旧或新且逐位一致；空 tracker 报错（非零退出码）而不是像 MCore 那样以状态 0 退出",
     "崩溃后磁盘上实际留下的 iteration 20（若像 MCore 那样原地写 iter_N/，它们就是可见的残缺检查点）",
     nc, partial > 0,
     headline="{world} rank、{boundaries} 个边界、{runs} 次崩溃：旧 {old} / 新 {new} / 撕裂 {torn} / 丢失已确认 {lost} / 挂起 {hang}；"
              "空 tracker 直接 load rc={empty_tracker_rc}，--fallback rc={empty_tracker_fallback_rc} → iter {empty_tracker_fallback_iter}",
     nc_headline="{nc.crash_runs} 次崩溃中 {nc.partial_iter20_dirs} 次留下不完整的 iteration 20（{nc.partial_files} 个残缺/缺失文件，中位数只写了 {nc.median_bytes_fraction} 的字节）")
EOF
