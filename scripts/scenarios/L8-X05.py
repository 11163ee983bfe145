#!/usr/bin/env python3
# title: 本地/内存检查点与进程内重启
# question: seeds/level8/L8-X05.md
"""Two checkpoint tiers and an in-process restart with the PyTorch training
example (examples/torch_gpt, ckpt's Python API; helper:
helpers/inprocess_restart.py). Local (non-persistent) saves every step into a
node-local dir (/dev/shm when writable), persistent saves every P steps; a
fault after step F is caught and the job restarts in the same process from
the local tier: time-to-resume, steps lost, losses bitwise equal to the
uninterrupted run. Then the node dies (the local dir is gone): the restart
falls back to the persistent tier and loses the steps since it. A cold
restart (a new process: interpreter, torch import, job build, load) from the
persistent checkpoint is timed for comparison.
Negative control: local checkpoints only (no persistent tier, no replication)
and the node dies - nothing to load, the job starts from iteration 0."""
import shutil

from scenlib import *  # noqa: F403

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.abspath(os.path.join(HERE, "..", "..", "examples"))
MODEL, STEPS, P, F = ("tiny", 12, 5, 9) if REDUCED else ("tiny", 16, 5, 13)
shm = "/dev/shm" if os.access("/dev/shm", os.W_OK) else S
local = os.path.join(shm, f"ckpt-{ID}-{os.getpid()}-local")
env = dict(os.environ, PYTHONPATH=EXAMPLES, OMP_NUM_THREADS="1")
try:
    must("two_tier", [PY, os.path.join(HERE, "helpers", "inprocess_restart.py"), "--persist", path("persist"),
                      "--local", local, "--out", path("two_tier.json"), "--model", MODEL, "--steps", STEPS,
                      "--persist-every", P, "--fail-at", F], env=env)
finally:
    shutil.rmtree(local, ignore_errors=True)
with open(path("two_tier.json")) as fh:
    m = json.load(fh)
# Cold restart: a new process loads the persistent checkpoint (and trains 0 steps: --steps = its iteration).
t0 = now()
must("cold", [PY, "-m", "torch_gpt.train", "--model", MODEL, "--load", path("persist"),
              "--steps", m["node_loss_resumed_at"], "--ckpt-comm", "torch"], env=env)
cold_s = now() - t0

n = {k: m[k] for k in ("steps", "fail_at", "persist_every", "inprocess_restored_from", "inprocess_resumed_at",
                       "inprocess_steps_lost", "inprocess_resume_s", "inprocess_bitwise_equal_steps",
                       "inprocess_compared_steps", "node_loss_restored_from", "node_loss_resumed_at",
                       "node_loss_steps_lost", "node_loss_resume_s", "node_loss_bitwise_equal_steps",
                       "node_loss_compared_steps")}
n["local_tier"] = "/dev/shm" if shm == "/dev/shm" else "scratch dir"
n["node_loss_local_error"] = m["node_loss_local_error"].split(":")[1].strip() if m["node_loss_local_error"] else ""
n["cold_restart_s"] = round(cold_s, 3)
n["cold_over_inprocess_ratio"] = round(cold_s / max(m["inprocess_resume_s"], 1e-6), 1)
nc = {"restored_from": m["nc_restored_from"], "resumed_at": m["nc_resumed_at"], "steps_lost": m["nc_steps_lost"]}
checks = [
    ("in-process restart resumes from the local tier at the fault step (0 steps lost)",
     n["inprocess_restored_from"] == "local" and n["inprocess_steps_lost"] == 0),
    ("after the in-process restart every step is bitwise equal to the uninterrupted run",
     n["inprocess_compared_steps"] > 0 and n["inprocess_bitwise_equal_steps"] == n["inprocess_compared_steps"]),
    ("node loss: the local tier is gone, the restart falls back to the persistent tier",
     n["node_loss_restored_from"] == "persistent" and n["node_loss_local_error"] != ""),
    ("node loss loses exactly the steps since the last persistent save (fail_at mod P)",
     n["node_loss_steps_lost"] == F % P),
    ("node loss resume is bitwise equal too",
     n["node_loss_bitwise_equal_steps"] == n["node_loss_compared_steps"] > 0),
    ("a cold restart (new process) takes longer than the in-process one", cold_s > m["inprocess_resume_s"]),
]
emit("本地/内存检查点与进程内重启",
     f"examples/torch_gpt {MODEL}, 1 process: local save every step to {n['local_tier']}, persistent every {P}; "
     f"fault after step {F} of {STEPS}",
     n, checks,
     "本地层（每步、节点本地）让进程内重启在 {inprocess_resume_s} s 内从第 {inprocess_resumed_at} 步继续、丢 "
     "{inprocess_steps_lost} 步且逐位一致；节点丢失时本地层随节点消失，只能退回持久层，丢 {node_loss_steps_lost} 步",
     "只有本地检查点（无持久层、无复制），节点丢失",
     nc, nc["restored_from"] == "none" and nc["steps_lost"] == F,
     headline="进程内重启：从本地层（{local_tier}）第 {inprocess_resumed_at} 步恢复，重建+加载 {inprocess_resume_s} s，丢 "
              "{inprocess_steps_lost} 步，之后 {inprocess_bitwise_equal_steps}/{inprocess_compared_steps} 步逐位一致；"
              "冷重启（新进程）{cold_restart_s} s（{cold_over_inprocess_ratio}x）；节点丢失：本地层报 {node_loss_local_error}，"
              "退回持久层第 {node_loss_resumed_at} 步，丢 {node_loss_steps_lost} 步",
     headline_en="in-process restart: resumed from the local tier ({local_tier}) at step {inprocess_resumed_at}, rebuild + "
                 "load {inprocess_resume_s} s, {inprocess_steps_lost} steps lost, then "
                 "{inprocess_bitwise_equal_steps}/{inprocess_compared_steps} steps bitwise equal; cold restart (new "
                 "process) {cold_restart_s} s ({cold_over_inprocess_ratio}x); node loss: local tier fails with "
                 "{node_loss_local_error}, fallback to the persistent step {node_loss_resumed_at}, "
                 "{node_loss_steps_lost} steps lost",
     nc_headline="无可加载的检查点（restored_from={nc.restored_from}），从第 {nc.resumed_at} 步重新开始，丢 {nc.steps_lost} 步",
     nc_headline_en="nothing to load (restored_from={nc.restored_from}): the job restarts at step {nc.resumed_at}, "
                    "{nc.steps_lost} steps lost")
