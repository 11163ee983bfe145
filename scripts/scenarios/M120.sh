#!/usr/bin/env bash
# title: 跨布局续训的数值：逐元素 vs TP all-reduce 的 ulp
# question: seeds/level8/M120.md
# `ckpt train` in two numerics modes. elementwise: every update is a function
# of (global element index, step, seed) only - layout-invariant by
# construction. tp-reduce: row-parallel weights get a gradient through a TP
# all-reduce of partial matmul sums, as in Megatron's RowParallelLinear, so the
# fp32 summation order depends on TP.
# Measured: (1) elementwise, half the run at TP1xDP2 and the rest resumed at
# TP2xPP2 vs the whole run at TP1xDP2 - bitwise? (2) tp-reduce, kill+resume at a
# fixed TP2 vs straight TP2 - bitwise? (3) tp-reduce straight at TP1 vs TP2:
# which tensors differ and by how many ulps.
# Negative control: (3) and tp-reduce resumed across layouts (TP1 -> TP2xPP2):
# without layout-invariant math a layout change is not bitwise.
# shellcheck source=lib.sh
source "${SCENARIO_LIB:-$(dirname "$0")/lib.sh}"
N=40
((REDUCED)) && N=20
H=$((N / 2))
T=(--model tiny --seed 11)

must e_ref mpi tp=1,dp=2 train --root "$SCRATCH/e_ref" "${T[@]}" --steps $N --json
must e_half mpi tp=1,dp=2 train --root "$SCRATCH/e_x" "${T[@]}" --steps $H --json
must e_res mpi tp=2,pp=2 train --root "$SCRATCH/e_x" "${T[@]}" --steps $N --resume --json
must e_diff "$CKPT" diff "$SCRATCH/e_ref" "$SCRATCH/e_x" --json
R=(--mode tp-reduce)
must r_tp1 mpi tp=1 train --root "$SCRATCH/r_tp1" "${T[@]}" "${R[@]}" --steps $N --json
must r_tp2 mpi tp=2 train --root "$SCRATCH/r_tp2" "${T[@]}" "${R[@]}" --steps $N --json
run_to r_kill mpi tp=2 train --root "$SCRATCH/r_tp2b" "${T[@]}" "${R[@]}" --steps $N --save-at $H --kill-after-save --json
must r_res mpi tp=2 train --root "$SCRATCH/r_tp2b" "${T[@]}" "${R[@]}" --steps $N --resume --json
must r_same "$CKPT" diff "$SCRATCH/r_tp2" "$SCRATCH/r_tp2b" --json
run_to r_cross "$CKPT" diff "$SCRATCH/r_tp1" "$SCRATCH/r_tp2" --json
must r_half mpi tp=1 train --root "$SCRATCH/r_x" "${T[@]}" "${R[@]}" --steps $H --json
must r_xres mpi tp=2,pp=2 train --root "$SCRATCH/r_x" "${T[@]}" "${R[@]}" --steps $N --resume --json
run_to r_xdiff "$CKPT" diff "$SCRATCH/r_tp1" "$SCRATCH/r_x" --json

py <<'EOF'
e, same, cross, xdiff = J("e_diff"), J("r_same"), J("r_cross"), J("r_xdiff")
def ulp(v):
    return float("inf") if v in ("nan", None) else float(v)
row_parallel = ("self_attention.linear_proj.weight", "mlp.linear_fc2.weight")
model_t = [t for t in cross["tensors"] if not t["key"].startswith("optimizer.")]
fp32_t = [t for t in cross["tensors"] if t["key"].startswith("optimizer.state.fp32_param.")]
only_row = all(t["key"].endswith(row_parallel) for t in cross["tensors"])
model_bad = sum(t["differing"] for t in model_t)
model_elems = sum(t["elements"] for t in model_t)
n = {
    "iterations": J("e_res")["iteration"],
    "elementwise_cross_layout_differing": len(e["tensors"]), "elementwise_max_ulp": e["max_ulp"],
    "tp_reduce_same_layout_differing": len(same["tensors"]),
    "cross_tensors_differing": len(cross["tensors"]), "cross_tensors_compared": cross["tensors_compared"],
    "cross_only_row_parallel": only_row,
    "bf16_tensors_differing": len(model_t), "bf16_elements_differing": model_bad,
    "bf16_max_ulp": max([ulp(t["max_ulp"]) for t in model_t], default=0),
    "fp32_param_max_ulp": max([ulp(t["max_ulp"]) for t in fp32_t], default=0),
    "fp32_param_max_abs": max([t["max_abs"] for t in fp32_t], default=0.0),
}
nc = {"tp1_vs_tp2_tensors_differing": len(cross["tensors"]), "tp1_vs_tp2_max_ulp": cross["max_ulp"],
      "resume_tp1_to_tp2pp2_tensors_differing": len(xdiff["tensors"]), "resume_max_ulp": xdiff["max_ulp"]}
checks = [
    ("elementwise: resume at TP2xPP2 of a TP1xDP2 run == straight run, bit for bit", e["same"]),
    ("tp-reduce: kill + resume at the same TP2 == straight TP2, bit for bit", same["same"]),
    ("tp-reduce TP1 vs TP2: only the TP-reduced (row-parallel) tensors and their optimizer states differ", only_row),
    ("tp-reduce TP1 vs TP2: bf16 params within 16 ulp", n["bf16_max_ulp"] <= 16),
]
emit("跨布局续训的数值：逐元素 vs TP all-reduce 的 ulp",
     f"ckpt train tiny, {n['iterations']} iterations; elementwise TP1xDP2 → resume TP2xPP2; tp-reduce at TP1, TP2, kill+resume TP2, TP1 → resume TP2xPP2",
     n, checks,
     "只有计算本身与布局无关（逐元素更新 + 以全局元素下标为键的计数器 RNG）时，换布局续训才逐位一致；TP all-reduce 改变 fp32 求和顺序，"
     "差异只出现在经过 TP 归约的 row-parallel 权重及其优化器状态上，bf16 参数只差几个 ulp；固定布局下续训仍是逐位的",
     "tp-reduce（TP all-reduce matmul）下比较 TP1 与 TP2，以及 TP1 → TP2xPP2 续训",
     nc, (not cross["same"]) and (not xdiff["same"]),
     headline="逐元素模式跨布局续训 {elementwise_cross_layout_differing} 个张量不同；tp-reduce 同布局续训 {tp_reduce_same_layout_differing} 个不同；"
              "tp-reduce TP1 vs TP2：{cross_tensors_differing}/{cross_tensors_compared} 个张量不同（只有 row-parallel={cross_only_row_parallel}），"
              "bf16 参数 {bf16_elements_differing} 个元素、最多 {bf16_max_ulp} ulp；fp32 main param 最多 {fp32_param_max_ulp} ulp（max abs {fp32_param_max_abs:.2e}）",
     nc_headline="TP1 vs TP2 {nc.tp1_vs_tp2_tensors_differing} 个张量不同（max ulp {nc.tp1_vs_tp2_max_ulp}）；TP1 → TP2xPP2 续训 {nc.resume_tp1_to_tp2pp2_tensors_differing} 个不同")
EOF
