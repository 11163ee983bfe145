#!/usr/bin/env python3
# title: fully parallel load：DP 组内分读再交换
# question: seeds/level8/L8-X04.md
"""Fully parallel load (MCore --ckpt-fully-parallel-load: the DP group splits
the reads with the save's greedy and exchanges what it read) against ckpt's
`load --share-reads`. A TP1 x DP4 job loads a checkpoint saved at TP2 x DP2
(an online reshard: every rank needs the whole model). Measured per rank:
bytes read from disk, bytes received from the rank that read them; job-wide:
read amplification (bytes read / unique checkpoint bytes), the busiest
reader's share, exchange rounds; every element checked on the shared load.
(At TP1 x DP4 the DP group is the whole job, so `--share-reads job` is the
same group; the same-layout case, two DP groups of 2, is M111's.)
Negative control: --share-reads none, i.e. what MCore does without
--ckpt-fully-parallel-load (its default): every DP replica reads the same
shards - amplification = DP and the busiest rank reads the whole model."""
from scenlib import *  # noqa: F403

MODEL = model()
must("save", mpi("tp=2,dp=2", "save", "--root", path("c"), "--iter", 10, "--model", MODEL, "--json"))
must("inspect", ck("inspect", path("c"), "--json"))
L4 = "tp=1,dp=4"
must("dp", mpi(L4, "load", "--root", path("c"), "--json", "--share-reads", "dp"))
must("none", mpi(L4, "load", "--root", path("c"), "--json", "--share-reads", "none", "--no-check"))

ins, dp, none_ = (J(k) for k in ("inspect", "dp", "none"))
U = sum(t["bytes"] for t in ins["tensors"])


def per_rank(run, key):
    return [r[key] for r in run["memory"]["per_rank"]]


def amp(run):
    return round(run["bytes"] / U, 2)


dp_read, dp_recv = per_rank(dp, "bytes"), per_rank(dp, "received")
n = {
    "unique_bytes": U,
    "ranks": len(dp_read),
    "dp_read_amplification": amp(dp),
    "dp_rank_read_max": max(dp_read),
    "dp_rank_read_min": min(dp_read),
    "dp_busiest_reader_share": round(max(dp_read) / dp["bytes"], 3),
    "dp_rank_received_max": max(dp_recv),
    "dp_share_rounds": dp["share_rounds"],
    "dp_elements_checked": dp["elements_checked"],
    "dp_mismatches": dp["mismatches"],
    "dp_load_s": round(dp["seconds"], 3),
}
none_read = per_rank(none_, "bytes")
nc = {
    "read_amplification": amp(none_),
    "rank_read_max": max(none_read),
    "rank_read_min": min(none_read),
    "busiest_over_shared_busiest": round(max(none_read) / max(dp_read), 2),
    "load_s": round(none_["seconds"], 3),
}
checks = [
    ("shared load (dp) reads every stored byte once: amplification <= 1.05", dp["bytes"] <= 1.05 * U),
    ("the reads are spread: the busiest of 4 readers reads <= 1/3 of the bytes", max(dp_read) <= dp["bytes"] / 3),
    ("each rank gets the rest from its peers (received >= half the model on every rank)",
     min(dp_recv) >= 0.5 * U),
    ("the shared load is correct: every element checked, 0 mismatches",
     dp["mismatches"] == 0 and dp["elements_checked"] > 0),
]
emit("fully parallel load：DP 组内分读再交换",
     f"{MODEL} saved at TP2xDP2 ({U} B unique); loaded at TP1xDP4 (one DP group of 4 = the job) with --share-reads "
     "dp (every element checked) and none",
     n, checks,
     "DP 组内各 rank 用同一确定性分配各读不同的分片再交换：读放大 {dp_read_amplification}，最忙的读者只读 "
     "{dp_busiest_reader_share} 的字节，其余从组内收到；不分读时每个 DP 副本都读一遍（放大 = DP）",
     "--share-reads none（MCore 不开 --ckpt-fully-parallel-load 时的默认行为）：每个 DP 副本各读一遍",
     nc, nc["read_amplification"] >= 3.5 and nc["rank_read_max"] >= 0.95 * U,
     headline="TP2xDP2→TP1xDP4 共享读（dp）：读放大 {dp_read_amplification}，每 rank 读 {dp_rank_read_min}–{dp_rank_read_max} B"
              "（最忙读者占 {dp_busiest_reader_share}），每 rank 最多收 {dp_rank_received_max} B，{dp_share_rounds} 轮；"
              "{dp_elements_checked} 元素 {dp_mismatches} mismatch",
     headline_en="TP2xDP2->TP1xDP4 shared reads (dp): amplification {dp_read_amplification}, each rank reads "
                 "{dp_rank_read_min}-{dp_rank_read_max} B (busiest reader {dp_busiest_reader_share} of the bytes), "
                 "receives at most {dp_rank_received_max} B, {dp_share_rounds} rounds; {dp_elements_checked} elements, "
                 "{dp_mismatches} mismatches",
     nc_headline="读放大 {nc.read_amplification}，每个 rank 读 {nc.rank_read_min}–{nc.rank_read_max} B"
                 "（最忙 rank 是共享读时的 {nc.busiest_over_shared_busiest}x），加载 {nc.load_s} s vs 共享 {dp_load_s} s",
     nc_headline_en="read amplification {nc.read_amplification}, each rank reads {nc.rank_read_min}-{nc.rank_read_max} B "
                    "(busiest rank {nc.busiest_over_shared_busiest}x the shared one), load {nc.load_s} s vs shared "
                    "{dp_load_s} s")
