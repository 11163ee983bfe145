#!/usr/bin/env bash
# title: 数据迭代器状态跨 DP 变化：不跳样本、不重样本
# question: seeds/level8/M123.md
# `ckpt train` uses Megatron's pretraining sampler: global batch b serves the
# sample ids [consumed, consumed + global_batch), split into micro batches of
# micro_batch * dp ids, DP rank r taking its micro_batch slice. The checkpoint
# stores consumed_samples (plus a ledger: an order-independent digest of every
# consumed id). Measured: N/2 iterations at DP2 (micro batch 2), resumed at DP4
# with micro batch 1 - and at DP1 with micro batch 4 - to N; the ledger must equal
# exactly [0, N * global_batch), and the final state must equal a straight DP2 run.
# Negative control: the same resume without the iterator state (the data order
# restarts from sample 0).
# shellcheck source=lib.sh
source "${SCENARIO_LIB:-$(dirname "$0")/lib.sh}"
N=40
((REDUCED)) && N=20
H=$((N / 2)) GB=16
T=(--model tiny --seed 3 --global-batch "$GB")

must straight mpi tp=1,dp=2 train --root "$SCRATCH/ref" "${T[@]}" --micro-batch 2 --steps $N --json
must half4 mpi tp=1,dp=2 train --root "$SCRATCH/dp4" "${T[@]}" --micro-batch 2 --steps $H --json
must res4 mpi tp=1,dp=4 train --root "$SCRATCH/dp4" "${T[@]}" --micro-batch 1 --steps $N --resume --json
must half1 mpi tp=1,dp=2 train --root "$SCRATCH/dp1" "${T[@]}" --micro-batch 2 --steps $H --json
must res1 mpi tp=1,dp=1 train --root "$SCRATCH/dp1" "${T[@]}" --micro-batch 4 --steps $N --resume --json
must diff4 "$CKPT" diff "$SCRATCH/ref" "$SCRATCH/dp4" --json
must diff1 "$CKPT" diff "$SCRATCH/ref" "$SCRATCH/dp1" --json
must nhalf mpi tp=1,dp=2 train --root "$SCRATCH/noit" "${T[@]}" --micro-batch 2 --steps $H --no-iterator-state --json
must nres mpi tp=1,dp=4 train --root "$SCRATCH/noit" "${T[@]}" --micro-batch 1 --steps $N --resume --no-iterator-state --json
run_to ndiff "$CKPT" diff "$SCRATCH/ref" "$SCRATCH/noit" --json

py <<'EOF'
r4, r1, nr = J("res4"), J("res1"), J("nres")
d4, d1, nd = J("diff4"), J("diff1"), J("ndiff")
N, GB = r4["iteration"], 16
n = {"iterations": N, "global_batch": GB, "resumed_at": r4["resumed"]["iteration"],
     "dp4_consumed": r4["consumed_samples"], "dp4_exactly_once": r4["samples_exactly_once"],
     "dp1_consumed": r1["consumed_samples"], "dp1_exactly_once": r1["samples_exactly_once"],
     "expected_consumed": N * GB,
     "dp4_tensors_differing": len(d4["tensors"]), "dp1_tensors_differing": len(d1["tensors"])}
nc = {"consumed": nr["consumed_samples"], "consumed_matches_iterations": nr["consumed_matches_iterations"],
      "samples_replayed": N * GB - nr["consumed_samples"] if not nr["consumed_matches_iterations"] else 0,
      "tensors_differing": len(nd["tensors"])}
checks = [
    ("DP2 -> DP4 (micro 2 -> 1): every sample of [0, N*GB) exactly once",
     r4["samples_exactly_once"] and r4["consumed_matches_iterations"] and r4["consumed_samples"] == N * GB),
    ("DP2 -> DP1 (micro 2 -> 4): every sample exactly once",
     r1["samples_exactly_once"] and r1["consumed_matches_iterations"] and r1["consumed_samples"] == N * GB),
    ("final state equals the straight DP2 run, bit for bit", d4["same"] and d1["same"]),
]
emit("数据迭代器状态跨 DP 变化：不跳样本、不重样本",
     f"ckpt train tiny, global batch {GB}, {N} iterations; DP2 (micro 2) for {n['resumed_at']}, then DP4 (micro 1) or DP1 (micro 4)",
     n, checks,
     "Megatron 的 pretraining sampler 以全局 consumed_samples 为唯一游标：global batch 的样本区间与 DP、micro batch 无关，"
     "换 DP 后各 rank 从同一游标重新切自己的片段；只要 global batch 不变，就不跳、不重，并且逐位等价",
     "续训时不保存/不加载迭代器状态（--no-iterator-state）",
     nc, (not nr["consumed_matches_iterations"]) and nc["tensors_differing"] > 0,
     headline="第 {resumed_at} 步由 DP2 换到 DP4 / DP1：consumed_samples {dp4_consumed} / {dp1_consumed}（应为 {expected_consumed}），"
              "恰好一次={dp4_exactly_once}/{dp1_exactly_once}；与直跑 DP2 相比 {dp4_tensors_differing}/{dp1_tensors_differing} 个张量不同",
     nc_headline="consumed_samples 只有 {nc.consumed}（与迭代数不符），{nc.samples_replayed} 个样本被重复训练，{nc.tensors_differing} 个张量偏离")
EOF
