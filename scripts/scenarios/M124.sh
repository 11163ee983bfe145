#!/usr/bin/env bash
# title: 回归 CI：布局无关指纹与 golden 值
# question: seeds/level8/M124.md
# A golden run of `ckpt train` (elementwise, bitwise-deterministic) records the
# layout-invariant fingerprint of its final checkpoint (`ckpt fingerprint`:
# SHA-256 over every tensor in global row-major order, padding rows excluded).
# CI then (1) reruns the same configuration at the same layout, (2) at another
# layout (TP2xPP2 instead of TP1xDP2), (3) with a regression: the peak LR off
# by 1e-4 relative. Each candidate is checked against the golden digest, and
# `ckpt diff` says which tensors differ and by how many ulps.
# Negative control: a CI that compares the checkpoint files' bytes (sha256 of
# the shard files) - it raises a false alarm on the layout change.
# shellcheck source=lib.sh
source "${SCENARIO_LIB:-$(dirname "$0")/lib.sh}"
N=30
((REDUCED)) && N=20
T=(--model tiny --seed 9 --steps "$N")

must golden mpi tp=1,dp=2 train --root "$SCRATCH/golden" "${T[@]}" --json
must fp_golden "$CKPT" fingerprint "$SCRATCH/golden" --json
must rerun mpi tp=1,dp=2 train --root "$SCRATCH/rerun" "${T[@]}" --json
must layout mpi tp=2,pp=2 train --root "$SCRATCH/layout" "${T[@]}" --json
must regress mpi tp=1,dp=2 train --root "$SCRATCH/regress" "${T[@]}" --lr 0.0010001 --json
for c in rerun layout regress; do
  must "fp_$c" "$CKPT" fingerprint "$SCRATCH/$c" --json
  run_to "diff_$c" "$CKPT" diff "$SCRATCH/golden" "$SCRATCH/$c" --json
done

py <<'EOF'
import glob, hashlib
def file_digest(name):
    h = hashlib.sha256()
    for p in sorted(glob.glob(os.path.join(S, name, "iter_*", "*.h5"))):
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()
g = J("fp_golden")["digest"]
fp = {c: J(f"fp_{c}")["digest"] for c in ("rerun", "layout", "regress")}
dg = {c: J(f"diff_{c}") for c in ("rerun", "layout", "regress")}
bytes_ = {c: file_digest(c) for c in ("golden", "rerun", "layout")}
reg = dg["regress"]
model = [t for t in reg["tensors"] if not t["key"].startswith("optimizer.")]
n = {"iterations": J("golden")["iteration"], "golden": g[:16],
     "rerun_match": fp["rerun"] == g, "layout_match": fp["layout"] == g, "regress_match": fp["regress"] == g,
     "diff_rc_rerun": RC("diff_rerun"), "diff_rc_layout": RC("diff_layout"), "diff_rc_regress": RC("diff_regress"),
     "regress_tensors": len(reg["tensors"]), "regress_compared": reg["tensors_compared"],
     "regress_bf16_elements": sum(t["differing"] for t in model), "bf16_elements": sum(t["elements"] for t in model),
     "fingerprint_s": round(J("fp_golden")["seconds"], 3), "fingerprint_mb_per_s": round(J("fp_golden")["mb_per_s"])}
nc = {"bytes_rerun_match": bytes_["rerun"] == bytes_["golden"], "bytes_layout_match": bytes_["layout"] == bytes_["golden"],
      "false_alarm": bytes_["layout"] != bytes_["golden"] and fp["layout"] == g}
checks = [
    ("same config, same layout: fingerprint == golden, diff exit 0", fp["rerun"] == g and RC("diff_rerun") == 0),
    ("same config, other layout: fingerprint == golden, diff exit 0", fp["layout"] == g and RC("diff_layout") == 0),
    ("LR regression of 1e-4: fingerprint != golden, diff exit 1 naming tensors",
     fp["regress"] != g and RC("diff_regress") == 1 and len(reg["tensors"]) > 0),
]
emit("回归 CI：布局无关指纹与 golden 值",
     f"ckpt train tiny, {n['iterations']} iterations; golden at TP1xDP2; candidates: rerun, TP2xPP2, peak LR 0.0010001 instead of 0.001",
     n, checks,
     "golden 值应是布局无关的状态指纹（按全局行优先序哈希每个张量，排除 padding）：逐位确定的配置可用精确比较，换布局不误报，"
     "1e-4 的 LR 偏差也会被发现并由 diff 定位到张量与 ulp；非逐位确定的配置（如 TP all-reduce）改用按张量的 ulp/绝对误差容差",
     "按 checkpoint 文件字节比较（shard 文件的 sha256）",
     nc, nc["false_alarm"],
     headline="golden {golden}…：重跑一致={rerun_match}、换布局一致={layout_match}、LR 偏 1e-4 一致={regress_match}；"
              "diff 退出码 {diff_rc_rerun}/{diff_rc_layout}/{diff_rc_regress}，回归定位到 {regress_tensors}/{regress_compared} 个张量"
              "（bf16 参数 {regress_bf16_elements}/{bf16_elements} 个元素）；指纹 {fingerprint_mb_per_s} MB/s",
     nc_headline="同布局重跑文件字节一致={nc.bytes_rerun_match}，换布局文件字节一致={nc.bytes_layout_match} → 误报={nc.false_alarm}")
EOF
