#!/usr/bin/env python3
# title: MoE / EP 检查点 reshard：expert 的全局编号与 expert-DP 副本
# question: seeds/level8/L8-X01.md
"""A MoE GPT (MCore MoELayer rules: router TP-replicated; experts split over EP
in contiguous blocks, global expert = ep_rank * local + i; expert weights keyed
once with an expert axis; expert replicas live on the expert-data-parallel
group, replica_id (0, tp, expert_dp)) saves at DP2 x EP2 with its distributed
optimizer state in model space. Loads at DP4 x EP4, TP2 x DP2 x EP2 and DP1
(every model and optimizer element checked); written bytes vs unique bytes.
Negative control (over the real tensors of the offline TP1 reshard): a loader
that assigns experts round-robin (expert e on EP rank e % EP, a common
alternative layout) instead of MCore's contiguous blocks, at EP4."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))
from scenlib import *  # noqa: F403,E402
import h5boxes  # noqa: E402

E = 8
MODEL = f"tiny:num_experts={E},moe_ffn_hidden=32" if REDUCED else f"tiny:num_experts={E},moe_ffn_hidden=128,hidden=256"
R = path("ep2")
must("save", mpi("tp=1,dp=2,ep=2", "save", "--root", R, "--iter", 50, "--model", MODEL, "--optimizer", "model", "--json"))
must("ins", ck("inspect", R, "--json"))
loads = {"dp4ep4": "tp=1,dp=4,ep=4", "tp2dp2ep2": "tp=2,dp=2,ep=2", "dp1": "tp=1,dp=1"}
for name, layout in loads.items():
    must(name, mpi(layout, "load", "--root", R, "--json"))
must("rs1", ck("reshard", R, path("one"), "--to", "tp=1,dp=1", "--json"))

ins, save = J("ins"), J("save")
unique = sum(t["bytes"] for t in ins["tensors"])
expert_keys = [t for t in ins["tensors"] if ".mlp.experts." in t["key"] and not t["key"].startswith("optimizer.")]
router = [t for t in ins["tensors"] if t["key"].endswith("mlp.router.weight")]
full = h5boxes.assemble(path("one", "iter_*", "rank_*.h5"),
                       lambda k: ".mlp.experts." in k and not k.startswith("optimizer."))
EP, local = 4, E // 4
wrong = total = 0
for key, arr in full.items():
    axis = next((i for i, d in enumerate(arr.shape) if d == E), None)  # the expert axis (after a layer axis)
    if axis is None:
        continue
    a = np.moveaxis(arr, axis, 0).reshape(E, -1)
    for r in range(EP):
        for i in range(local):
            correct, naive = r * local + i, r + i * EP  # contiguous block vs round-robin
            wrong += int(np.count_nonzero(a[correct] != a[naive]))
            total += a[correct].size
n = {"experts": E, "expert_tensors": len(expert_keys), "expert_axis": expert_keys[0]["global_shape"][0] if expert_keys else 0,
     "router_tensors": len(router), "unique_bytes": unique, "written_bytes": save["bytes"]}
for name in loads:
    ld = J(name)
    n[f"{name}_elements"] = ld["elements_checked"]
    n[f"{name}_mismatches"] = ld["mismatches"]
    n[f"{name}_opt_elements"] = ld.get("optimizer_elements_checked", 0)
    n[f"{name}_opt_mismatches"] = ld.get("optimizer_mismatches", 0)
nc = {"naive_wrong_elements": wrong, "naive_elements": total,
      "naive_wrong_fraction": round(wrong / total, 3) if total else 0.0}
checks = [
    ("every expert weight has a global expert axis of num_experts", expert_keys and
     all(t["global_shape"][0] == E for t in expert_keys)),
    ("written bytes == unique bytes (expert replicas over expert-DP written once)", save["bytes"] == unique),
] + [(f"{name}: model + optimizer 0 mismatches", J(name)["mismatches"] == 0 and J(name).get("optimizer_mismatches", 0) == 0
      and J(name)["elements_checked"] > 0) for name in loads]
emit("MoE / EP 检查点 reshard：expert 的全局编号与 expert-DP 副本",
     f"{MODEL} saved at DP2xEP2 (model-space optimizer); loads at DP4xEP4, TP2xDP2xEP2, DP1",
     n, checks,
     "expert 以全局编号登记（ep_rank·local + i，连续块），权重带 num_experts 的 expert 轴、只登记一次；副本沿 expert-DP 组（replica_id 第三位是 expert-DP rank），"
     "所以换 EP、换 TP、换 DP 都是盒子求交，逐元素恢复",
     "按轮转（expert e 在 EP rank e % EP）而不是连续块分配 expert 的加载器，EP4",
     nc, wrong > 0,
     headline="{experts} 个 expert、{expert_tensors} 个 expert 张量（expert 轴 {expert_axis}）；写入 {written_bytes} B = 唯一 {unique_bytes} B；"
              "EP4/TP2xEP2/DP1 重载 {dp4ep4_mismatches}/{tp2dp2ep2_mismatches}/{dp1_mismatches} mismatch，优化器 "
              "{dp4ep4_opt_mismatches}/{tp2dp2ep2_opt_mismatches}/{dp1_opt_mismatches}（EP4 检查 {dp4ep4_opt_elements} 个优化器元素）",
     headline_en="{experts} experts, {expert_tensors} expert tensors (expert axis {expert_axis}); wrote {written_bytes} B = "
                 "unique {unique_bytes} B; reload at EP4/TP2xEP2/DP1: {dp4ep4_mismatches}/{tp2dp2ep2_mismatches}/"
                 "{dp1_mismatches} mismatches, optimizer {dp4ep4_opt_mismatches}/{tp2dp2ep2_opt_mismatches}/"
                 "{dp1_opt_mismatches} ({dp4ep4_opt_elements} optimizer elements checked at EP4)",
     nc_headline="轮转分配：{nc.naive_elements} 个 expert 元素中 {nc.naive_wrong_elements} 个错（{nc.naive_wrong_fraction}）",
     nc_headline_en="round-robin assignment: {nc.naive_wrong_elements} of {nc.naive_elements} expert elements wrong "
                    "({nc.naive_wrong_fraction})")
