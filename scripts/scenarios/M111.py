#!/usr/bin/env python3
# title: sharded state dict：replica 去重与写入均衡
# question: seeds/level8/M111.md
"""A TP2 x DP2 job saves its Megatron-Core-style sharded state dict. Measured:
bytes written vs the unique bytes of the global tensors (replica dedup: every
element written once), vs what every rank writing its whole local state would
write; bytes per rank max/min with replica balancing; the read amplification
of a same-layout load with DP read sharing (default --share-reads dp) and
without it (--share-reads none); a load at another layout checks every element.
Negative control: --no-balance (each replica written by its main holder only,
replica_id all zeros, as a naive "rank with dp_rank 0 writes" rule does) - the
busiest rank writes ~2x and DP rank 1 idles."""
from scenlib import *  # noqa: F403

MODEL = model()
L = "tp=2,dp=2"
must("bal", mpi(L, "save", "--root", path("bal"), "--iter", 100, "--model", MODEL, "--json"))
must("nobal", mpi(L, "save", "--root", path("nobal"), "--iter", 100, "--model", MODEL, "--json", "--no-balance"))
must("inspect", ck("inspect", path("bal"), "--json"))
# Same layout: every rank's local state bytes (what a per-rank torch.save would write), reads with and without sharing.
must("same", mpi(L, "load", "--root", path("bal"), "--json"))
must("same_none", mpi(L, "load", "--root", path("bal"), "--json", "--share-reads", "none"))
# Another layout: dedup and balancing lost nothing.
must("other", mpi("tp=4", "load", "--root", path("bal"), "--json"))
# TP4 like "other": a quarter of the state per rank (the TP1xDP2 load this replaced took 14 s of a 55 s budget).
must("other_nobal", mpi("tp=4", "load", "--root", path("nobal"), "--json"))

bal, nobal, ins, same, none_, other, other_nb = (J(k) for k in ("bal", "nobal", "inspect", "same", "same_none",
                                                               "other", "other_nobal"))
unique = sum(t["bytes"] for t in ins["tensors"])
local_sum = sum(r["state"] for r in same["memory"]["per_rank"])
n = {
    "unique_bytes": unique,
    "written_bytes": bal["bytes"],
    "per_rank_full_bytes": local_sum,
    "dedup_factor": round(local_sum / bal["bytes"], 2),
    "bal_max_rank_bytes": bal["max_rank_bytes"],
    "bal_min_rank_bytes": bal["min_rank_bytes"],
    "bal_max_over_min": round(bal["max_rank_bytes"] / max(1, bal["min_rank_bytes"]), 3),
    "bal_save_s": round(bal["seconds"], 3),
    "tensors": len(ins["tensors"]),
    "same_layout_load_read_bytes": same["bytes"],
    "load_read_amplification": round(same["bytes"] / unique, 2),
    "load_read_amplification_share_none": round(none_["bytes"] / unique, 2),
    "load_tp4_elements": other["elements_checked"],
    "load_tp4_mismatches": other["mismatches"],
}
nc = {
    "nobal_max_rank_bytes": nobal["max_rank_bytes"],
    "nobal_min_rank_bytes": nobal["min_rank_bytes"],
    "nobal_max_over_bal_max": round(nobal["max_rank_bytes"] / bal["max_rank_bytes"], 2),
    "nobal_save_s": round(nobal["seconds"], 3),
    "nobal_load_mismatches": other_nb["mismatches"],
}
checks = [
    ("every element written exactly once (written == unique bytes)", bal["bytes"] == unique),
    ("no-balance writes the same unique bytes", nobal["bytes"] == unique),
    ("balanced: busiest rank within 10% of the idlest", bal["max_rank_bytes"] <= 1.1 * bal["min_rank_bytes"]),
    ("per-rank full states would write >= 1.5x (DP2 replicas)", local_sum >= 1.5 * bal["bytes"]),
    ("same-layout load with DP read sharing reads each byte once (amplification <= 1.05)",
     same["bytes"] <= 1.05 * unique),
    ("without read sharing every DP replica reads (amplification >= 1.5)", none_["bytes"] >= 1.5 * unique),
    ("load at TP4 checks every element: 0 mismatches", other["mismatches"] == 0 and other["elements_checked"] > 0),
    ("no-balance checkpoint is still correct", other_nb["mismatches"] == 0),
]
emit("sharded state dict：replica 去重与写入均衡",
     f"{bal['model']} TP2xDP2 save, {n['tensors']} tensors; load at TP2xDP2 (--share-reads dp / none) and TP4",
     n, checks,
     "replica_id 非零的副本不写：写入字节 = 全局唯一字节（各 rank 各存一份完整本地 state 要多写 {dedup_factor} 倍）；"
     "同一副本组按持有者轮换写者后每 rank 字节 max/min≈1；加载侧按 DP 组共享读取时读放大 {load_read_amplification}"
     "（不共享 {load_read_amplification_share_none}）；换 TP 加载逐元素 0 mismatch",
     "--no-balance：只让主副本（replica_id 全 0）持有者写",
     nc,
     nc["nobal_min_rank_bytes"] == 0 and nc["nobal_max_over_bal_max"] >= 1.5,
     headline="写入 {written_bytes} B = 唯一 {unique_bytes} B（逐 rank 全存需 {per_rank_full_bytes} B，{dedup_factor}x）；"
              "均衡后每 rank max/min {bal_max_over_min:.3f}；同布局加载读放大 {load_read_amplification}（不共享读 "
              "{load_read_amplification_share_none}）；TP4 重载 {load_tp4_elements} 元素 {load_tp4_mismatches} mismatch",
     headline_en="wrote {written_bytes} B = unique {unique_bytes} B (full per-rank states: {per_rank_full_bytes} B, "
                 "{dedup_factor}x); balanced per-rank max/min {bal_max_over_min:.3f}; same-layout load read "
                 "amplification {load_read_amplification} (no read sharing: {load_read_amplification_share_none}); "
                 "TP4 reload {load_tp4_elements} elements, {load_tp4_mismatches} mismatches",
     nc_headline="最忙 rank {nc.nobal_max_rank_bytes} B（均衡时的 {nc.nobal_max_over_bal_max}x），最闲 rank "
                 "{nc.nobal_min_rank_bytes} B；保存 {nc.nobal_save_s} s vs 均衡 {bal_save_s} s",
     nc_headline_en="busiest rank {nc.nobal_max_rank_bytes} B ({nc.nobal_max_over_bal_max}x the balanced one), idlest "
                    "{nc.nobal_min_rank_bytes} B; save {nc.nobal_save_s} s vs balanced {bal_save_s} s")
