#!/usr/bin/env bash
# title: 保存/加载中 rank 挂起或死亡：deadline 与不提交
# question: seeds/level8/M121.md
# `ckpt faults deadline`: one rank of a TP2 save or load hangs (sleeps forever)
# or is SIGKILLed at a chosen point of a chosen phase (begin, plan, write/fsync,
# vote, commit, load). Every collective has a deadline; measured: how long the
# surviving ranks take to fail (bound: deadline + 1 s), which rank reports the
# missing peer, and whether anything was committed (must be no).
# Negative control: the same hang with a deadline of 10 minutes (Megatron's
# default --distributed-timeout-minutes, i.e. effectively none) - an outside
# watchdog has to kill the job, the survivors never report.
# shellcheck source=lib.sh
source "${SCENARIO_LIB:-$(dirname "$0")/lib.sh}"
DEADLINE_MS=2000 WATCHDOG_S=8
export DEADLINE_MS WATCHDOG_S
SCEN=()  # default: the full set of `ckpt faults deadline`
if ((REDUCED)); then
  export WATCHDOG_S=5
  SCEN=(--scenarios "save:hang@step.vote#1:r1=vote save:sigkill@env.pwrite#5:r1=vote save:hang@step.manifest_write#1:r0=commit load:hang@env.pread#1:r1=load")
fi

must deadline "$CKPT" faults deadline --work "$SCRATCH/dl" --layout tp=2 --model tiny --timeout-ms $DEADLINE_MS \
  --mpirun "$MPIRUN" "${SCEN[@]}"

mkdir -p "$SCRATCH/nc/res"
t0=$(now)
run_to nc timeout $WATCHDOG_S $MPIRUN -np 2 "$CKPT" faults child --phase save --root "$SCRATCH/nc/root" --layout tp=2 \
  --model tiny --iter 20 --spec "point=step.vote rank=1 action=hang" --timeout-ms 600000 --result-dir "$SCRATCH/nc/res"
t1=$(now)
"$PY" -c "import json; print(json.dumps({'seconds': $t1 - $t0}))" >"$SCRATCH/nc_time.out"

py <<'EOF'
import glob
text = TXT("deadline")
bound = float(re.search(r"bound deadline \+ 1 s = ([0-9.]+) s", text).group(1))
rows = []
for m in re.finditer(r"^((?:save|load):\S+)\s+(\d+)/(\d+)\s+([0-9.]+)\s+-\s+([0-9.]+)\s+(\d+)/(\d+)\s+(yes|no)\s+(\S+)\s*$",
                     text, re.M):
    rows.append({"name": m.group(1), "surv": int(m.group(2)), "surv_of": int(m.group(3)), "lat_min": float(m.group(4)),
                 "lat_max": float(m.group(5)), "reporters": int(m.group(6)), "committed": m.group(8) == "yes",
                 "result": m.group(9)})
phases = sorted({r["name"].rsplit("=", 1)[1] for r in rows})
ncroot = os.path.join(S, "nc", "root")
nc_committed = bool(glob.glob(os.path.join(ncroot, "iter_*")))
nc_reports = len(glob.glob(os.path.join(S, "nc", "res", "rank_*.json")))
n = {"scenarios": len(rows), "phases": ",".join(phases), "deadline_s": float(os.environ.get("DEADLINE_MS", 2000)) / 1000,
     "bound_s": bound, "latency_min_s": min(r["lat_min"] for r in rows), "latency_max_s": max(r["lat_max"] for r in rows),
     "committed": sum(r["committed"] for r in rows), "ok": sum(r["result"] == "ok" for r in rows)}
nc = {"deadline_s": 600.0, "watchdog_s": float(os.environ["WATCHDOG_S"]), "rc": RC("nc"),
      "seconds_until_killed": round(J("nc_time")["seconds"], 1), "survivor_reports": nc_reports,
      "committed": nc_committed}
checks = [
    ("every scenario ran and passed", rows and n["ok"] == len(rows) and RC("deadline") == 0),
    ("survivors fail within deadline + 1 s", n["latency_max_s"] <= bound),
    ("every survivor reported the failure", all(r["surv"] == r["surv_of"] for r in rows)),
    ("nothing committed after a hung or dead rank", n["committed"] == 0),
]
emit("保存/加载中 rank 挂起或死亡：deadline 与不提交",
     f"faults deadline: TP2 tiny, hang / SIGKILL of one rank in phases {n['phases']}, every collective with a {n['deadline_s']} s deadline",
     n, checks,
     "checkpoint 的每个集合通信都带 deadline（非阻塞点对点 + 每次调用独立 tag，阻塞式 collective 无法超时）："
     "某个 rank 挂起或死亡时，幸存 rank 在 deadline + 1 s 内报错并点名缺失的 rank 与阶段，提交前的失败不会让任何 iteration 可见",
     "同样的挂起，但 deadline 设为 10 分钟（等同 Megatron 默认的 --distributed-timeout-minutes=10）",
     nc, nc["rc"] == 124 and nc_reports == 0 and not nc_committed,
     headline="{scenarios} 个挂起/死亡场景（阶段 {phases}）：幸存 rank 在 {latency_min_s:.2f}–{latency_max_s:.2f} s 内失败（上界 {bound_s} s），"
              "提交 {committed} 次",
     nc_headline="外部看门狗 {nc.seconds_until_killed} s 后杀掉作业（rc={nc.rc}），幸存 rank 报告 {nc.survivor_reports} 份——它们一直阻塞在投票上")
EOF
