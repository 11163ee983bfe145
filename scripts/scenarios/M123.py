#!/usr/bin/env python3
# title: 数据迭代器状态跨 DP 变化：不跳样本、不重样本
# question: seeds/level8/M123.md
"""`ckpt train` uses Megatron's pretraining sampler: global batch b serves the
sample ids [consumed, consumed + global_batch), split into micro batches of
micro_batch * dp ids, DP rank r taking its micro_batch slice. The checkpoint
stores consumed_samples (plus a ledger: an order-independent digest of every
consumed id). Measured: N/2 iterations at DP2 (micro batch 2), resumed at DP4
with micro batch 1 - and at DP1 with micro batch 4 - to N; the ledger must
equal exactly [0, N * global_batch), and the final state must equal a straight
DP2 run.
Negative control: the same resume without the iterator state (the data order
restarts from sample 0)."""
from scenlib import *  # noqa: F403

N = 20 if REDUCED else 40
H, GB = N // 2, 16
T = ["--model", "tiny", "--seed", 3, "--global-batch", GB]


def tr(name, layout, root, micro, steps, *extra):
    must(name, mpi(layout, "train", "--root", path(root), *T, "--micro-batch", micro, "--steps", steps, *extra, "--json"))


tr("straight", "tp=1,dp=2", "ref", 2, N)
tr("half4", "tp=1,dp=2", "dp4", 2, H)
tr("res4", "tp=1,dp=4", "dp4", 1, N, "--resume")
tr("half1", "tp=1,dp=2", "dp1", 2, H)
tr("res1", "tp=1,dp=1", "dp1", 4, N, "--resume")
must("diff4", ck("diff", path("ref"), path("dp4"), "--json"))
must("diff1", ck("diff", path("ref"), path("dp1"), "--json"))
tr("nhalf", "tp=1,dp=2", "noit", 2, H, "--no-iterator-state")
tr("nres", "tp=1,dp=4", "noit", 1, N, "--resume", "--no-iterator-state")
run_to("ndiff", ck("diff", path("ref"), path("noit"), "--json"))

r4, r1, nr = J("res4"), J("res1"), J("nres")
d4, d1, nd = J("diff4"), J("diff1"), J("ndiff")
N = r4["iteration"]
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
     headline_en="switched DP2 -> DP4 / DP1 at step {resumed_at}: consumed_samples {dp4_consumed} / {dp1_consumed} "
                 "(expected {expected_consumed}), exactly once={dp4_exactly_once}/{dp1_exactly_once}; vs straight DP2 "
                 "{dp4_tensors_differing}/{dp1_tensors_differing} tensors differ",
     nc_headline="consumed_samples 只有 {nc.consumed}（与迭代数不符），{nc.samples_replayed} 个样本被重复训练，{nc.tensors_differing} 个张量偏离",
     nc_headline_en="consumed_samples only {nc.consumed} (does not match the iterations), {nc.samples_replayed} "
                    "samples trained twice, {nc.tensors_differing} tensors off")
