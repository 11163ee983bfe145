#!/usr/bin/env python3
# title: 保存时的慢节点（straggler）：谁慢、慢在哪个阶段
# question: seeds/level8/L8-X06.md
"""A TP2 x DP2 job saves twice: once clean, once with one slow writer (a
fault plan delays rank 2's first shard-file pwrite by D ms: `ckpt save
--faults 'point=env.pwrite rank=2 action=delay ms=D'`, the fault hooks of
faults/). `ckpt save` gathers every rank's phase times (plan, write, and the
wait for the others: vote + commit) and names the rank whose own write phase
took longest, with its time against the median. Measured: the straggler's
rank, phase and seconds, the median, the ratio; the clean save's ratio.
Negative control: what one rank's timers show (rank 0's phase times, as a
rank-0 log; and the min/max over ranks of the total save time, as Megatron's
'save-checkpoint' timer with --timing-log-option minmax): the delay shows up
on rank 0 as waiting (vote), min and max of the total are nearly equal
(every rank waits for the slowest), and no rank is named."""
from scenlib import *  # noqa: F403

MODEL = model()
L = "tp=2,dp=2"
D_MS = 1000 if REDUCED else 3000
must("clean", mpi(L, "save", "--root", path("clean"), "--iter", 1, "--model", MODEL, "--json"))
must("slow", mpi(L, "save", "--root", path("slow"), "--iter", 1, "--model", MODEL, "--json",
                 "--faults", f"point=env.pwrite rank=2 action=delay ms={D_MS}"))
must("verify", ck("verify", path("slow")))
clean, slow = J("clean"), J("slow")
s, c = slow["straggler"], clean["straggler"]
per = slow["per_rank"]
totals = [r["plan_s"] + r["write_s"] + r["wait_s"] for r in per]
r0 = per[0]
r0_phases = {"plan": r0["plan_s"], "write": r0["write_s"], "wait": r0["wait_s"]}
n = {
    "delay_ms": D_MS,
    "straggler_rank": s["rank"],
    "straggler_phase": s["phase"],
    "straggler_write_s": round(s["seconds"], 3),
    "median_write_s": round(s["median_seconds"], 3),
    "straggler_ratio": round(s["ratio"], 1),
    "longest_wait_rank": s["longest_wait_rank"],
    "longest_wait_s": round(s["longest_wait_seconds"], 3),
    "clean_ratio": round(c["ratio"], 2),
    "clean_save_s": round(clean["seconds"], 3),
    "slow_save_s": round(slow["seconds"], 3),
}
nc = {
    "rank0_largest_phase": max(r0_phases, key=r0_phases.get),
    "rank0_write_s": round(r0["write_s"], 3),
    "rank0_wait_s": round(r0["wait_s"], 3),
    "total_min_s": round(min(totals), 3),
    "total_max_s": round(max(totals), 3),
    "total_max_over_min_ratio": round(max(totals) / max(min(totals), 1e-9), 2),
}
checks = [
    ("the report names the delayed rank (2) in its write phase", s["rank"] == 2 and s["phase"] == "write"),
    ("its write phase holds the delay (>= 0.9 x D)", s["seconds"] >= 0.9 * D_MS / 1000),
    # the delayed pwrite overlaps the rank's own encoding threads, so not all of D adds to its phase
    ("it stands out: its write phase exceeds the median by >= 0.5 x D", s["seconds"] - s["median_seconds"] >= 0.5 * D_MS / 1000),
    ("the others waited for it (longest wait on another rank >= 0.6 x D)",
     s["longest_wait_rank"] != 2 and s["longest_wait_seconds"] >= 0.6 * D_MS / 1000),
    ("the clean save has no such outlier (ratio < 3)", c["ratio"] < 3),
    ("the slowed checkpoint still verifies (ckpt verify exit 0)", RC("verify") == 0),
]
emit("保存时的慢节点（straggler）：谁慢、慢在哪个阶段",
     f"{slow['model']} TP2xDP2 save, rank 2's first shard pwrite delayed {D_MS} ms (faults/ delay hook) vs a clean save",
     n, checks,
     "每个 rank 的阶段时间汇总后，慢写者在自己的 write 阶段显形（rank {straggler_rank}，{straggler_write_s} s，"
     "中位数的 {straggler_ratio} 倍），其他 rank 表现为等待；只看一个 rank 或只看总时间的 min/max 点不出名字",
     "只看 rank 0 的阶段计时、或各 rank 总保存时间的 min/max（Megatron 'save-checkpoint' 计时器 minmax 日志）",
     nc, nc["rank0_largest_phase"] != "write" and nc["total_max_over_min_ratio"] < 1.5,
     headline="慢写者：rank {straggler_rank} 的 {straggler_phase} 阶段 {straggler_write_s} s（中位数 {median_write_s} s，"
              "{straggler_ratio}x；注入 {delay_ms} ms）；等待最久的是 rank {longest_wait_rank}（{longest_wait_s} s）；"
              "无注入时比值 {clean_ratio}",
     headline_en="slow writer: rank {straggler_rank}, {straggler_phase} phase {straggler_write_s} s (median "
                 "{median_write_s} s, {straggler_ratio}x; {delay_ms} ms injected); longest wait on rank "
                 "{longest_wait_rank} ({longest_wait_s} s); clean save ratio {clean_ratio}",
     nc_headline="rank 0 的最大阶段是 {nc.rank0_largest_phase}（write {nc.rank0_write_s} s，等待 {nc.rank0_wait_s} s）；"
                 "总时间 min {nc.total_min_s} s / max {nc.total_max_s} s（{nc.total_max_over_min_ratio}x），看不出是谁",
     nc_headline_en="rank 0's largest phase is {nc.rank0_largest_phase} (write {nc.rank0_write_s} s, wait "
                    "{nc.rank0_wait_s} s); total min {nc.total_min_s} s / max {nc.total_max_s} s "
                    "({nc.total_max_over_min_ratio}x): no rank named")
