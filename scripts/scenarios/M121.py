#!/usr/bin/env python3
# title: 保存/加载中 rank 挂起或死亡：deadline 与不提交
# question: seeds/level8/M121.md
"""`ckpt faults deadline`: one rank of a TP2 save or load hangs (sleeps forever)
or is SIGKILLed at a chosen point of a chosen phase (begin, plan, write/fsync,
vote, commit, load). Every collective of ckpt has a deadline; measured: how long
the surviving ranks take to fail (bound: deadline + 1 s; 1.25 x deadline +
1.25 s when the faulty rank is rank 0, which decides: the others wait 1.25 x
the deadline for its decision, then look on disk for a commit it may have
made), which rank reports
the missing peer, and whether anything was committed (must be no).
Negative control: a real blocking collective without a deadline - an MPI
barrier (mpi4py) that one rank never reaches, the way a checkpoint vote built
on torch.distributed / MPI blocking collectives waits. The survivors never
report; only the launcher's watchdog (its deadline) ends the job by killing
every process of it.
Control through the real code path of a Megatron job: a torch.distributed gloo
group created with a short timeout (as Megatron passes
--distributed-timeout-minutes to init_process_group), one rank absent from a
barrier: the barrier raises at the group timeout and not before - the group
timeout (Megatron default 10 min) is the only bound a blocking collective has."""
import glob
import json
import socket

from scenlib import *  # noqa: F403

DEADLINE_MS, WATCHDOG_S = 2000, (5.0 if REDUCED else 8.0)
SCEN = []  # default: the full set of `ckpt faults deadline`
if REDUCED:
    SCEN = ["--scenarios", "save:hang@step.vote#1:r1=vote save:sigkill@env.pwrite#5:r1=vote "
            "save:hang@step.manifest_write#1:r0=commit load:hang@env.pread#1:r1=load"]
must("deadline", ck("faults", "deadline", "--work", path("dl"), "--layout", "tp=2", "--model", "tiny", "--timeout-ms",
                    DEADLINE_MS, "--mpirun", MPIRUN_STR, *SCEN))
os.makedirs(path("nc"))
t0 = now()
nc_job = run_to("nc", MPIRUN + ["-np", "2", PY, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers",
                                                              "blocking_barrier.py"), path("nc"), "1"],
                deadline_s=WATCHDOG_S)
nc_seconds = now() - t0

GLOO_TIMEOUT_S = 2.0
os.makedirs(path("gloo"))
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
run_to("gloo", MPIRUN + ["-np", "2", PY, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers",
                                                     "gloo_barrier_timeout.py"), path("gloo"), str(GLOO_TIMEOUT_S),
                         str(port)], deadline_s=60)
gloo = {}
if os.path.exists(path("gloo", "rank_0.json")):
    with open(path("gloo", "rank_0.json")) as f:
        gloo = json.load(f)

text = TXT("deadline")
bound = float(re.search(r"bound deadline \+ 1 s = ([0-9.]+) s", text).group(1))
bound_root = float(re.search(r"faulty rank 0: 1\.25 x deadline \+ 1\.25 s = ([0-9.]+) s", text).group(1))
rows = []
for m in re.finditer(r"^((?:save|load):\S+)\s+(\d+)/(\d+)\s+([0-9.]+)\s+-\s+([0-9.]+)\s+(\d+)/(\d+)\s+(yes|no)\s+(\S+)\s*$",
                     text, re.M):
    rows.append({"name": m.group(1), "surv": int(m.group(2)), "surv_of": int(m.group(3)), "lat_min": float(m.group(4)),
                 "lat_max": float(m.group(5)), "reporters": int(m.group(6)), "committed": m.group(8) == "yes",
                 "result": m.group(9)})
phases = sorted({r["name"].rsplit("=", 1)[1] for r in rows})
started = len(glob.glob(path("nc", "started_*")))
reports = len(glob.glob(path("nc", "rank_*.json")))
n = {"scenarios": len(rows), "phases": ",".join(phases), "deadline_s": DEADLINE_MS / 1000,
     "bound_s": bound, "latency_min_s": min(r["lat_min"] for r in rows), "latency_max_s": max(r["lat_max"] for r in rows),
     "bound_root_s": bound_root,
     "latency_max_root_s": max([r["lat_max"] for r in rows if ":r0=" in r["name"]], default=0.0),
     "latency_max_other_s": max([r["lat_max"] for r in rows if ":r0=" not in r["name"]], default=0.0),
     "committed": sum(r["committed"] for r in rows), "ok": sum(r["result"] == "ok" for r in rows),
     "gloo_timeout_s": GLOO_TIMEOUT_S, "gloo_barrier_raised": bool(gloo.get("raised")),
     "gloo_raised_after_s": round(gloo.get("after_s", -1.0), 2),
     "torch_default_pg_timeout_s": gloo.get("torch_default_timeout_s", -1.0)}
nc = {"watchdog_s": WATCHDOG_S, "rc": RC("nc"), "seconds_until_killed": round(nc_seconds, 1),
      "ranks_started": started, "survivor_reports": reports, "processes_killed": nc_job.killed}
checks = [
    ("every scenario ran and passed", rows and n["ok"] == len(rows) and RC("deadline") == 0),
    ("survivors fail within deadline + 1 s (1.25 x deadline + 1.25 s when rank 0 is the faulty one)",
     n["latency_max_other_s"] <= bound and n["latency_max_root_s"] <= bound_root),
    ("every survivor reported the failure", all(r["surv"] == r["surv_of"] for r in rows)),
    ("nothing committed after a hung or dead rank", n["committed"] == 0),
    ("a gloo barrier with an absent peer raises at the group timeout, not before",
     n["gloo_barrier_raised"] and GLOO_TIMEOUT_S <= n["gloo_raised_after_s"] <= GLOO_TIMEOUT_S + 2.0),
]
emit("保存/加载中 rank 挂起或死亡：deadline 与不提交",
     f"faults deadline: TP2 tiny, hang / SIGKILL of one rank in phases {n['phases']}, every collective with a "
     f"{n['deadline_s']} s deadline",
     n, checks,
     "checkpoint 的每个集合通信都带 deadline（非阻塞点对点 + 每次调用独立 tag，阻塞式 collective 无法超时）："
     "某个 rank 挂起或死亡时，幸存 rank 在 deadline + 1 s 内（故障的是负责决定的 rank 0 时 1.25 × deadline + 1.25 s）"
     "报错并点名缺失的 rank 与阶段，提交前的失败不会让任何 iteration 可见",
     "真实的阻塞式 collective（mpi4py MPI_Barrier，没有 deadline），一个 rank 永远不到达",
     nc, nc["rc"] == 124 and started == 2 and reports == 0,
     headline="{scenarios} 个挂起/死亡场景（阶段 {phases}）：幸存 rank 在 {latency_min_s:.2f}–{latency_max_other_s:.2f} s 内失败"
              "（上界 {bound_s} s）；故障 rank 为 rank 0 时 ≤ {latency_max_root_s:.2f} s（上界 {bound_root_s} s），"
              "提交 {committed} 次",
     headline_en="{scenarios} hang/death scenarios (phases {phases}): survivors fail within {latency_min_s:.2f}-"
                 "{latency_max_other_s:.2f} s (bound {bound_s} s), <= {latency_max_root_s:.2f} s when rank 0 is the "
                 "faulty one (bound {bound_root_s} s), {committed} commits",
     nc_headline="{nc.ranks_started} 个 rank 都已启动，幸存 rank 阻塞在 barrier 上、报告 {nc.survivor_reports} 份；"
                 "看门狗 {nc.seconds_until_killed} s 后杀掉作业的 {nc.processes_killed} 个进程（rc={nc.rc}）",
     nc_headline_en="{nc.ranks_started} ranks started; the survivor blocks in the barrier and reports "
                    "{nc.survivor_reports} times; the watchdog killed the job's {nc.processes_killed} processes after "
                    "{nc.seconds_until_killed} s (rc={nc.rc})")
