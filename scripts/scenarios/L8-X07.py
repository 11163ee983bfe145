#!/usr/bin/env python3
# title: 抢占信号与检查点保留：SIGTERM 后保存退出，保留策略不删最后一个
# question: seeds/level8/L8-X07.md
"""Preemption and retention with `ckpt train`.
(1) A DP2 job with --exit-signal-handler (Megatron-LM's flag) trains far
past the test, saving every 4 iterations; once it has logged iteration
>= 6, SIGTERM goes to rank 1 only (a preempted node). Every rank learns it
at the next step (an AllGather of the flag, as MCore's
DistributedSignalHandler), saves that iteration, and the job exits 0.
Measured: the iteration saved, signal-to-exit seconds, steps lost (iteration
reached - iteration saved), and a resume from it.
(2) Retention (--save-retain-interval K, --keep-last N): saves every 2 to 8
with K = 4 keep {4, 8}; a save of 10 whose tracker update fails (fault plan:
point=step.tracker_update action=eio; committed with a warning) deletes
nothing even with --keep-last 1, because the tracker does not name 10 yet;
the next clean save (12) then keeps only 12.
Negative control: the same job without --exit-signal-handler - SIGTERM kills
rank 1, mpirun ends the job, and the steps since the last periodic save are
lost (last logged iteration - newest committed)."""
import signal
import threading
import time

from scenlib import *  # noqa: F403

STEP_S = 30.0
SAVE_EVERY, SIGNAL_AT = 4, 6  # the signal lands between periodic saves, so the control loses steps


def ranks_of(root: str) -> dict:
    """{rank: pid} of the `ckpt train` processes writing to root."""
    out = {}
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                cmd = f.read().split(b"\0")
            if os.path.basename(cmd[0]) not in (b"ckpt", b"ckpt-lab") or b"train" not in cmd or root.encode() not in cmd:
                continue
            with open(f"/proc/{p}/environ", "rb") as f:
                envs = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            out[int(envs[b"OMPI_COMM_WORLD_RANK"])] = int(p)
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return out


def logged(name: str) -> list:
    return [int(m) for m in re.findall(r"train: iteration (\d+)", TXT(name))]


def term_rank1_after(name: str, root: str, at: int, box: dict) -> None:
    """Waits until the job logged iteration >= at, then SIGTERMs rank 1; records when."""
    end = now() + STEP_S
    while now() < end:
        its = logged(name)
        pids = ranks_of(root)
        if its and its[-1] >= at and 1 in pids:
            box["logged_at_signal"] = its[-1]
            box["t"] = now()
            os.kill(pids[1], signal.SIGTERM)
            return
        time.sleep(0.02)


def preempted(name: str, handler: bool) -> dict:
    root = path(name)
    box = {}
    th = threading.Thread(target=term_rank1_after, args=(name, root, SIGNAL_AT, box), daemon=True)
    th.start()
    args = ["--root", root, "--model", "tiny", "--steps", 10 ** 7, "--save-every", SAVE_EVERY, "--log-interval", 1,
            "--timeout-ms", 10000, "--json"] + (["--exit-signal-handler"] if handler else [])
    run_to(name, mpi("dp=2", "train", *args), deadline_s=STEP_S)
    t_end = now()
    th.join(1)
    box["exit_s"] = round(t_end - box["t"], 3) if "t" in box else -1.0
    return box


sig = preempted("term", True)
must("term_verify", ck("verify", path("term")))
must("term_inspect", ck("inspect", path("term"), "--json"))
summary = J("term")
saved_at = J("term_inspect")["iteration"]
resume_to = saved_at + 2
must("term_resume", mpi("dp=2", "train", "--root", path("term"), "--model", "tiny", "--steps", resume_to,
                        "--resume", "--json"))

nsig = preempted("kill", False)
must("kill_inspect", ck("inspect", path("kill"), "--json"))
kill_logged = logged("kill")

R = path("ret")
T = ["--root", R, "--model", "tiny", "--save-every", 2]
must("ret8", mpi("dp=2", "train", *T, "--steps", 8, "--save-retain-interval", 4))
kept8 = sorted(int(d[5:]) for d in os.listdir(R) if d.startswith("iter_"))
must("ret10", mpi("dp=2", "train", *T, "--steps", 10, "--resume", "--keep-last", 1,
                  "--faults", "point=step.tracker_update action=eio"))
kept10 = sorted(int(d[5:]) for d in os.listdir(R) if d.startswith("iter_"))
with open(os.path.join(R, "latest_checkpointed_iteration.txt")) as fh:
    tracker10 = int(fh.read().strip())
must("ret12", mpi("dp=2", "train", *T, "--steps", 12, "--resume", "--keep-last", 1))
kept12 = sorted(int(d[5:]) for d in os.listdir(R) if d.startswith("iter_"))
must("ret12_verify", ck("verify", R))

n = {
    "signal_rc": RC("term"),
    "signalled_rank": 1,
    "logged_at_signal": sig.get("logged_at_signal", -1),
    "exit_signal": bool(summary.get("exit_signal", False)),
    "saved_iteration": saved_at,
    "summary_iteration": summary.get("iteration", -1),
    "steps_lost": summary.get("iteration", -1) - saved_at,
    "signal_to_exit_s": sig["exit_s"],
    "resumed_from": J("term_resume")["resumed"]["iteration"],
    "retain_interval_kept": ",".join(map(str, kept8)),
    "tracker_failed_kept": ",".join(map(str, kept10)),
    "tracker_failed_tracker": tracker10,
    "retention_skipped_logged": "retention skipped" in TXT("ret10"),
    "keep_last_kept": ",".join(map(str, kept12)),
}
nc = {
    "rc": RC("kill"),
    "logged_at_signal": nsig.get("logged_at_signal", -1),
    "last_logged": kill_logged[-1] if kill_logged else -1,
    "newest_committed": J("kill_inspect")["iteration"],
}
nc["steps_lost"] = nc["last_logged"] - nc["newest_committed"]
checks = [
    ("SIGTERM to rank 1 only: the job exits 0 after saving", n["signal_rc"] == 0 and n["exit_signal"]),
    ("it saved the iteration it stopped at (0 steps lost), after the signal",
     n["saved_iteration"] == n["summary_iteration"] and n["steps_lost"] == 0 and n["saved_iteration"] >= SIGNAL_AT
     and n["logged_at_signal"] >= SIGNAL_AT),
    ("the preemption checkpoint verifies and resumes", RC("term_verify") == 0 and n["resumed_from"] == saved_at),
    ("--save-retain-interval 4 with saves every 2 keeps 4 and 8 (2, 6 deleted)", kept8 == [4, 8]),
    ("a save whose tracker update failed deletes nothing (tracker still names 8)",
     kept10 == [4, 8, 10] and tracker10 == 8 and n["retention_skipped_logged"]),
    ("once 12 is durable, --keep-last 1 keeps only 12 (and it verifies)",
     kept12 == [12] and RC("ret12_verify") == 0),
]
emit("抢占信号与检查点保留：SIGTERM 后保存退出，保留策略不删最后一个",
     f"ckpt train tiny DP2 (save every {SAVE_EVERY}, SIGTERM to rank 1 once iteration {SIGNAL_AT} is logged); retention runs saving every 2",
     n, checks,
     "--exit-signal-handler：任一 rank 收到 SIGTERM，下一步全体一致保存该步并以 0 退出（保存于 {saved_iteration}，丢 "
     "{steps_lost} 步）；保留策略只在新检查点持久（tracker 指向它）之后删除旧的，tracker 更新失败时一个不删",
     "不开 --exit-signal-handler，同样 SIGTERM rank 1",
     nc, nc["rc"] != 0 and nc["steps_lost"] > 0 and nc["logged_at_signal"] >= SIGNAL_AT,
     headline="SIGTERM→rank 1（已记录到第 {logged_at_signal} 步）：rc={signal_rc}，保存第 {saved_iteration} 步，丢 {steps_lost} 步，"
              "信号到退出 {signal_to_exit_s} s，从 {resumed_from} 续训；保留间隔 4 → 剩 {retain_interval_kept}；tracker "
              "更新失败的 10 → 剩 {tracker_failed_kept}（tracker={tracker_failed_tracker}）；12 持久后 keep-last 1 → 剩 "
              "{keep_last_kept}",
     headline_en="SIGTERM to rank 1 (logged up to {logged_at_signal}): rc={signal_rc}, saved iteration {saved_iteration}, "
                 "{steps_lost} steps lost, signal to exit {signal_to_exit_s} s, resumed from {resumed_from}; retain "
                 "interval 4 keeps {retain_interval_kept}; save 10 with a failed tracker update keeps "
                 "{tracker_failed_kept} (tracker={tracker_failed_tracker}); after 12 is durable keep-last 1 keeps "
                 "{keep_last_kept}",
     nc_headline="rc={nc.rc}：已训练到第 {nc.last_logged} 步，最新检查点第 {nc.newest_committed} 步，丢 {nc.steps_lost} 步",
     nc_headline_en="rc={nc.rc}: trained to iteration {nc.last_logged}, newest checkpoint {nc.newest_committed}, "
                    "{nc.steps_lost} steps lost")
