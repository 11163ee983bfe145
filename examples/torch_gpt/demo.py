"""`make demo`: a real PyTorch TP/DP GPT job checkpointed through ckpt.

  python3 -m torch_gpt.demo [--build build] [--out DIR] [--steps N] [--interval K]

1. straight  TP4 (4 ranks, spawn launcher) trains N steps, saving every K (sync);
2. crash     the same job, async saves, SIGKILLed while its save of an
             iteration >= 2K is in flight (files half written, nothing committed);
3. verify    `ckpt verify` re-hashes the latest committed checkpoint: intact;
4. resume    at TP4 (mpirun launcher) from it, saving into the same root;
5. reshard   at TP2 x DP2 (spawn) from the same iteration: an online reshard;
             right after the load it saves again, and the tensor fingerprints of
             the TP4 checkpoint and this TP2 save are compared;
then a table (step, loss straight, loss resumed TP4, loss resumed TP2xDP2), a
PNG of the three curves, and the measured save/load MB/s and async blocking.
Exit status 0 only when every check holds. Outputs under --out (demo_summary.json).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from . import story


def _args(argv):
    ap = argparse.ArgumentParser(prog="python3 -m torch_gpt.demo")
    ap.add_argument("--build", default=os.path.join(story.REPO, "build"))
    ap.add_argument("--out", default=None, help="work dir (default <build>/demo_torch)")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--interval", type=int, default=10)
    ap.add_argument("--png", default=None, help="plot path (default <out>/demo_loss.png)")
    a = ap.parse_args(argv)
    a.build = os.path.abspath(a.build)
    a.out = os.path.abspath(a.out or os.path.join(a.build, "demo_torch"))
    a.png = os.path.abspath(a.png or os.path.join(a.out, "demo_loss.png"))
    return a


def _say(msg: str) -> None:
    print(f"\n== {msg}", flush=True)


def _job(a, name: str, tp: int, extra: list[str]) -> list[str]:
    return ["--model", "tiny", "--tp", str(tp), "--micro-batch", "2", "--global-batch", "8",
            "--steps", str(a.steps), "--save-interval", str(a.interval),
            "--log", os.path.join(a.out, f"{name}.jsonl"),
            "--ckpt-stats", os.path.join(a.out, f"{name}.stats.jsonl")] + extra


def run_story(a) -> dict:
    out, b = a.out, a.build
    p = lambda *n: os.path.join(out, *n)
    res = {"steps": a.steps, "interval": a.interval}
    _say(f"1. straight: TP4 x DP1, {a.steps} steps, synchronous saves every {a.interval}")
    story.run(story.train_cmd(4, _job(a, "straight", 4, ["--save", p("straight")])), b)
    _say(f"2. crash: the same job with async saves, SIGKILL during a save of iteration "
         f">= {2 * a.interval}")
    kill = story.run_and_kill_mid_save(
        story.train_cmd(4, _job(a, "crash", 4, ["--save", p("ckpt"), "--async-save"])),
        b, p("ckpt"), 2 * a.interval, log=p("crash.out"))
    res["kill"] = kill
    print(f"killed (exit {kill['exit_code']}) while saving iteration {kill['killed_in_save_of']}:"
          f" {kill['tmp_dir']} held {kill['files_at_kill']}; committed: {kill['committed']}")
    _say("3. ckpt verify: the latest committed checkpoint")
    ver = story.ckpt_json(b, "verify", p("ckpt"))
    res["verify"] = ver
    resume_at = ver.get("iteration", max(kill["committed"]))
    print(json.dumps({k: ver.get(k) for k in ("ok", "iteration", "files", "chunks", "bytes",
                                              "mb_per_s") if k in ver}))
    _say(f"4. resume at TP4 (mpirun) from iteration {resume_at}, async saves into the same root")
    story.run(story.train_cmd(4, _job(a, "resume_tp4", 4, ["--load", p("ckpt"), "--save",
                                                             p("ckpt"), "--async-save"]),
                              launcher="mpirun"), b, echo=False)
    _say(f"5. resume at TP2 x DP2 (spawn) from iteration {resume_at}: online reshard")
    story.run(story.train_cmd(4, _job(a, "resume_tp2", 2, [
        "--load", p("ckpt"), "--load-iter", str(resume_at), "--save", p("tp2"),
        "--save-after-load", p("tp2_after_load")])), b)
    res["resume_at"] = resume_at
    return res


def checks(a, res: dict) -> dict:
    p = lambda *n: os.path.join(a.out, *n)
    logs = {n: story.read_jsonl(p(f"{n}.jsonl"))
            for n in ("straight", "crash", "resume_tp4", "resume_tp2")}
    k, b = res["resume_at"], a.build
    straight = {r["iteration"]: r for r in logs["straight"]}
    tail4 = [(r, straight[r["iteration"]]) for r in logs["resume_tp4"]]
    tail2 = [(r, straight[r["iteration"]]) for r in logs["resume_tp2"]]
    c = {"tp4_losses_bitwise": sum(r["loss_hex"] == s["loss_hex"] for r, s in tail4),
         "tp4_losses": len(tail4),
         "tp2_max_abs_loss_diff": max(abs(r["loss"] - s["loss"]) for r, s in tail2),
         "tp2_vs_tp4_max_abs_loss_diff": max(abs(x["loss"] - y["loss"]) for x, y in
                                             zip(logs["resume_tp2"], logs["resume_tp4"])),
         "crash_losses_bitwise": sum(r["loss_hex"] == straight[r["iteration"]]["loss_hex"]
                                     for r in logs["crash"])}
    c["final_state"] = story.compare_digests(story.tensor_digests(b, p("straight"), a.steps),
                                             story.tensor_digests(b, p("ckpt"), a.steps))
    c["after_reshard_load"] = story.compare_digests(story.tensor_digests(b, p("ckpt"), k),
                                                    story.tensor_digests(b, p("tp2_after_load")))
    c["ok"] = (c["tp4_losses_bitwise"] == c["tp4_losses"] == a.steps - k
               and not c["final_state"]["differing"] and not c["after_reshard_load"]["differing"]
               and c["crash_losses_bitwise"] == len(logs["crash"])
               and res["verify"].get("ok", False) and k < res["kill"]["killed_in_save_of"])
    res["logs"] = logs
    return c


def stats(a) -> dict:
    rows = []
    for n in ("straight", "crash", "resume_tp4", "resume_tp2"):
        path = os.path.join(a.out, f"{n}.stats.jsonl")
        rows += [dict(r, job=n) for r in story.read_jsonl(path)] if os.path.exists(path) else []
    pick = lambda op: [r for r in rows if r["op"] == op]
    out = {}
    for op in ("save", "load", "async_save"):
        rs = pick(op)
        if rs:
            out[op] = {"count": len(rs), "mb": rs[0]["bytes"] / 1e6,
                       "mb_per_s_median": sorted(r["mb_per_s"] for r in rs)[len(rs) // 2]}
    asy = pick("async_save")
    if asy:
        med = lambda f: sorted(f(r) for r in asy)[len(asy) // 2]
        out["async_save"].update(
            blocking_ms_median=med(lambda r: r["blocking_s"] * 1e3),
            ckpt_blocking_ms_median=med(lambda r: r["ckpt_blocking_s"] * 1e3),
            memcpy_ms_median=med(lambda r: r["memcpy_s"] * 1e3),
            ratio_median=med(lambda r: r["blocking_ratio_vs_memcpy"]),
            ckpt_ratio_median=med(lambda r: r["ckpt_blocking_ratio_vs_memcpy"]))
    return out


def print_table(a, res: dict) -> None:
    logs, k = res["logs"], res["resume_at"]
    col = {n: {r["iteration"]: r["loss"] for r in logs[n]} for n in logs}
    print("\n| step | loss straight (TP4) | loss resumed TP4 | loss resumed TP2xDP2 |")
    print("|---:|---:|---:|---:|")
    f = lambda d, s: f"{d[s]:.6f}" if s in d else ""
    for s in range(1, a.steps + 1):
        mark = "  <- resumed from here" if s == k + 1 else ""
        print(f"| {s} | {f(col['straight'], s)} | {f(col['resume_tp4'], s)} | "
              f"{f(col['resume_tp2'], s)} |{mark}")


def plot(a, res: dict) -> None:
    """Top: the three loss curves (they overlap: that is the result). Bottom:
    each resumed run's loss minus the straight run's at the same step."""
    import matplotlib  # noqa: PLC0415
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    logs, k, kill = res["logs"], res["resume_at"], res["kill"]["killed_in_save_of"]
    xy = lambda n: ([r["iteration"] for r in logs[n]], [r["loss"] for r in logs[n]])
    straight = {r["iteration"]: r["loss"] for r in logs["straight"]}
    dxy = lambda n: ([r["iteration"] for r in logs[n]],
                     [r["loss"] - straight[r["iteration"]] for r in logs[n]])
    fig, (ax, bx) = plt.subplots(2, 1, figsize=(8, 6), dpi=110, sharex=True,
                                 gridspec_kw={"height_ratios": [3, 1.3]})
    ax.plot(*xy("straight"), "-", color="0.2", lw=3, label="straight run, TP4 (never killed)")
    ax.plot(*xy("crash"), "-", color="tab:red", lw=1.2,
            label=f"killed run, TP4: SIGKILL during its save of iter {kill}")
    ax.plot(*xy("resume_tp4"), "--", color="tab:blue", lw=1.8,
            label=f"resumed at TP4 from committed iter {k}")
    ax.plot(*xy("resume_tp2"), ":", color="tab:orange", lw=2.4,
            label=f"resumed at TP2xDP2 from iter {k} (online reshard)")
    for x in (ax, bx):
        x.axvline(k, color="tab:green", lw=1, alpha=0.7)
        x.axvline(kill, color="tab:red", lw=1, alpha=0.5, ls="--")
        x.grid(alpha=0.3)
    top = max(r["loss"] for r in logs["straight"])
    ax.text(k + 0.3, top, f"resume from\niter {k}", color="tab:green", fontsize=8, va="top")
    ax.text(kill + 0.3, top, f"SIGKILL in\nsave {kill}", color="tab:red", fontsize=8, va="top")
    ax.set_ylabel("training loss (nats/byte)")
    ax.set_title("torch_gpt (Megatron-style TP/DP GPT in PyTorch) checkpointed with ckpt")
    ax.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1.0, 0.85))
    bx.plot(*dxy("resume_tp4"), "--", color="tab:blue", lw=1.8, label="TP4 resumed - straight")
    bx.plot(*dxy("resume_tp2"), ":", color="tab:orange", lw=2.2, marker=".",
            label="TP2xDP2 resumed - straight")
    bx.ticklabel_format(axis="y", style="sci", scilimits=(0, 0))
    bx.set_ylabel("loss difference")
    bx.set_xlabel("iteration")
    bx.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    os.makedirs(os.path.dirname(a.png), exist_ok=True)
    fig.savefig(a.png)


def main(argv=None) -> int:
    a = _args(sys.argv[1:] if argv is None else argv)
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    t0 = time.monotonic()
    res = run_story(a)
    c = checks(a, res)
    st = stats(a)
    print_table(a, res)
    plot(a, res)
    summary = {"checks": c, "stats": st, "kill": res["kill"], "resume_at": res["resume_at"],
               "verify": res["verify"], "seconds": time.monotonic() - t0}
    with open(os.path.join(a.out, "demo_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print_summary(summary, a)
    return 0 if c["ok"] else 1


def print_summary(s: dict, a) -> None:
    c, st = s["checks"], s["stats"]
    fs, ar = c["final_state"], c["after_reshard_load"]
    print(f"\nresumed TP4: {c['tp4_losses_bitwise']}/{c['tp4_losses']} losses bitwise equal to the "
          f"straight run; final state {fs['tensors_equal']}/{fs['tensors']} tensors, "
          f"{fs['elements_in_equal_tensors']:,}/{fs['elements']:,} elements bitwise equal")
    print(f"resumed TP2xDP2: after the load {ar['tensors_equal']}/{ar['tensors']} tensors "
          f"({ar['elements_in_equal_tensors']:,} elements) fingerprint-equal to the TP4 "
          f"checkpoint; loss max|diff| vs straight {c['tp2_max_abs_loss_diff']:.2e} "
          "(fp32 reduction order: TP2 sums over half the ranks, DP2 averages two micro-batch "
          "gradients)")
    for op in ("save", "load"):
        if op in st:
            v = st[op]
            print(f"{op}: {v['count']} x {v['mb']:.2f} MB (all ranks), median "
                  f"{v['mb_per_s_median']:.1f} MB/s (wall time of the collective call)")
    if "async_save" in st:
        v = st["async_save"]
        print(f"async save: {v['count']} x {v['mb']:.2f} MB; the training loop blocked "
              f"{v['blocking_ms_median']:.2f} ms (ckpt's snapshot {v['ckpt_blocking_ms_median']:.2f}"
              f" ms) vs memcpy of the same bytes {v['memcpy_ms_median']:.2f} ms: "
              f"{v['ratio_median']:.1f}x ({v['ckpt_ratio_median']:.1f}x) (medians, slowest rank)")
    print(f"plot: {a.png}")
    print(f"demo: {'PASSED' if c['ok'] else 'FAILED'} in {s['seconds']:.0f} s "
          f"(details: {os.path.join(a.out, 'demo_summary.json')})")


if __name__ == "__main__":
    sys.exit(main())
