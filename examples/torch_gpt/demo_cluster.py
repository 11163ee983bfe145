"""`make demo-cluster` (issue 31 item 5): the GPT job across hosts loses a node mid-save.

  python3 -m torch_gpt.demo_cluster [--build build] [--out DIR] [--steps N] [--interval K]

On a 2-node cluster of namespaces (scripts/cluster.py; needs root), the shared root a host
directory, torch.distributed's TCP store on n1's bridge address, ckpt.TorchComm:
1. straight  TP2 x DP2 on n1:2,n2:2 trains N steps, saving every K (never killed);
2. crash     the same job with async saves; node n2 is killed whole (every process in its
             namespaces, SIGKILL) while its save of an iteration >= 2K is in flight; the
             survivors on n1 are timed until they exit on their own (bounded wait);
3. verify    `ckpt verify` on the latest committed iteration (the in-flight one never commits);
4. restart   on n1 alone at a smaller layout, TP2 x DP1 (2 ranks), from that iteration:
             right after the load it saves again (fingerprint = the committed checkpoint),
             then trains on to N;
then a table of the losses (straight, crashed, resumed) and the checks. Exit 0 only when every
check holds; outputs (logs, demo_cluster_summary.json) under --out.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time

from . import story

sys.path.insert(0, os.path.join(story.REPO, "scripts"))
import cluster as cl  # noqa: E402
from cluster_launch import TorchJob  # noqa: E402

TRAIN = [story.PYTHON, "-m", "torch_gpt.train"]
CKPT_TIMEOUT_S = 10  # the crashed job's ckpt deadline: its survivors name the lost node after it
SURVIVOR_WAIT_S = 40  # > CKPT_TIMEOUT_S x 1.25 (a decision wait) + the exit


def _args(argv):
    ap = argparse.ArgumentParser(prog="python3 -m torch_gpt.demo_cluster")
    ap.add_argument("--build", default=os.path.join(story.REPO, "build"))
    ap.add_argument("--out", default=None, help="work dir (default <build>/demo_cluster)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--interval", type=int, default=5)
    a = ap.parse_args(argv)
    a.build = os.path.abspath(a.build)
    a.out = os.path.abspath(a.out or os.path.join(a.build, "demo_cluster"))
    return a


def _say(msg: str) -> None:
    print(f"\n== {msg}", flush=True)


def _job(c, a, name: str, hosts: dict, extra: list[str], port: int) -> TorchJob:
    argv = TRAIN + ["--model", "tiny", "--tp", "2", "--micro-batch", "2", "--global-batch", "8",
                    "--steps", str(a.steps), "--log", os.path.join(a.out, f"{name}.jsonl")] + extra
    log = open(os.path.join(a.out, f"{name}.out"), "w")
    return TorchJob(c, hosts, argv, port=port, env=story.job_env(a.build), log=log, cwd=story.REPO)


def _finish(job: TorchJob, name: str, a) -> None:
    if job.wait(600) != [0] * len(job.procs):
        raise RuntimeError(f"{name} failed:\n{open(os.path.join(a.out, name + '.out')).read()[-3000:]}")


def crash(c, a, root: str) -> dict:
    """Starts the async-saving job, kills n2 mid-save, times the survivors on n1."""
    job = _job(c, a, "crash", {"n1": 2, "n2": 2}, ["--save", root, "--save-interval", str(a.interval),
                                                   "--async-save", "--ckpt-timeout", str(CKPT_TIMEOUT_S)], 29662)
    deadline, caught = time.monotonic() + 600, None
    while caught is None and None in job.poll():
        if time.monotonic() > deadline:
            job.kill()
            raise TimeoutError("no save caught in flight within 600 s")
        for it, path in story._in_flight_saves(root, 2 * a.interval):
            if story._listing(path):
                caught = {"killed_in_save_of": it, "tmp_dir": os.path.basename(path),
                          "files_at_kill": len(story._listing(path))}
        time.sleep(0.002)
    if caught is None:
        raise RuntimeError("the job ended before a save of iteration >= 2K was in flight")
    t_kill = time.monotonic()
    c.kill("n2")
    survivors = [p for node, _, p in job.procs if node == "n1"]
    out = os.path.join(a.out, "crash.out")
    while any(p.poll() is None for p in survivors) and time.monotonic() - t_kill < SURVIVOR_WAIT_S:
        if "report_s" not in caught and "on host 'n2'" in open(out, errors="replace").read():
            caught["report_s"] = round(time.monotonic() - t_kill, 2)  # the first survivor named n2
        time.sleep(0.05)
    caught["survivors_exit_s"] = round(time.monotonic() - t_kill, 2)
    caught["survivors_exit_codes"] = [p.poll() for p in survivors]
    caught["survivors_exited"] = all(p.poll() is not None for p in survivors)
    job.kill()
    caught["committed"] = story.committed_iterations(root)
    lines = open(os.path.join(a.out, "crash.out")).read().splitlines()
    caught["survivor_errors"] = [ln for ln in lines if "rror" in ln][-3:]
    caught["lost_named"] = any("rank(s) 2" in ln and "on host 'n2'" in ln for ln in lines)
    return caught


def run_story(c, a) -> dict:
    p = lambda *n: os.path.join(a.out, *n)
    res = {"steps": a.steps, "interval": a.interval}
    _say(f"1. straight: TP2 x DP2 on n1:2,n2:2, {a.steps} steps, saves every {a.interval}")
    _finish(_job(c, a, "straight", {"n1": 2, "n2": 2}, ["--save", p("straight"), "--save-interval",
                                                        str(a.interval)], 29661), "straight", a)
    _say(f"2. crash: async saves; node n2 killed during a save of iteration >= {2 * a.interval}")
    res["kill"] = k = crash(c, a, p("ckpt"))
    print(f"n2 killed while saving iteration {k['killed_in_save_of']} ({k['tmp_dir']}: "
          f"{k['files_at_kill']} files); committed {k['committed']}; survivors on n1 "
          f"{'exited' if k['survivors_exited'] else 'still running'} after {k['survivors_exit_s']} s "
          f"(codes {k['survivors_exit_codes']}); first report naming n2 after {k.get('report_s')} s")
    for line in k["survivor_errors"]:
        print("  n1:", line[:200])
    _say("3. ckpt verify: the latest committed checkpoint")
    res["verify"] = ver = story.ckpt_json(a.build, "verify", p("ckpt"))
    res["resume_at"] = r = ver.get("iteration", max(k["committed"]))
    print(json.dumps({x: ver.get(x) for x in ("ok", "iteration", "files", "chunks", "bytes")}))
    c.restart("n2")  # back, empty /local; the restart below does not use it
    _say(f"4. restart on n1 alone at TP2 x DP1 (2 ranks) from iteration {r}")
    _finish(_job(c, a, "resumed", {"n1": 2}, ["--load", p("ckpt"), "--load-iter", str(r), "--save",
                                               p("resumed"), "--save-after-load", p("after_load")],
                 29663), "resumed", a)
    return res


def checks(a, res: dict) -> dict:
    p = lambda *n: os.path.join(a.out, *n)
    logs = {n: story.read_jsonl(p(f"{n}.jsonl")) for n in ("straight", "crash", "resumed")}
    straight = {x["iteration"]: x for x in logs["straight"]}
    r, kill = res["resume_at"], res["kill"]
    after = story.compare_digests(story.tensor_digests(a.build, p("ckpt"), r),
                                  story.tensor_digests(a.build, p("after_load")))
    diffs = [abs(x["loss"] - straight[x["iteration"]]["loss"]) for x in logs["resumed"]]
    c = {"after_load": after, "resumed_steps": [x["iteration"] for x in logs["resumed"]],
         "resumed_max_abs_loss_diff": max(diffs),
         "crash_losses_bitwise": sum(x["loss_hex"] == straight[x["iteration"]]["loss_hex"]
                                     for x in logs["crash"]), "crash_losses": len(logs["crash"])}
    c["ok"] = (res["verify"].get("ok", False) and r < kill["killed_in_save_of"]
               and kill["killed_in_save_of"] not in kill["committed"] and kill["lost_named"]
               and not after["differing"] and c["resumed_steps"] == list(range(r + 1, a.steps + 1))
               and c["resumed_max_abs_loss_diff"] < 1e-3
               and c["crash_losses_bitwise"] == c["crash_losses"])
    res["logs"] = logs
    return c


def print_table(a, res: dict) -> None:
    col = {n: {x["iteration"]: x["loss"] for x in res["logs"][n]} for n in res["logs"]}
    r, kill = res["resume_at"], res["kill"]["killed_in_save_of"]
    print("\n| step | straight 2 nodes TP2xDP2 | crashed 2 nodes | resumed n1 alone TP2xDP1 |")
    print("|---:|---:|---:|---:|")
    f = lambda d, s: f"{d[s]:.6f}" if s in d else ""
    for s in range(1, a.steps + 1):
        mark = ("  <- resumed from here" if s == r + 1 else "") + \
               ("  <- n2 killed in this save" if s == kill else "")
        print(f"| {s} | {f(col['straight'], s)} | {f(col['crash'], s)} | {f(col['resumed'], s)} |{mark}")


def main(argv=None) -> int:
    a = _args(sys.argv[1:] if argv is None else argv)
    why = cl.check()
    if why:
        print(f"demo-cluster needs network/UTS/mount/pid namespaces (root): {why}")
        return 2
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(a.out)
    t0 = time.monotonic()
    c = cl.Cluster.up(2, name="demo", owner=os.getpid())
    try:
        res = run_story(c, a)
    finally:
        c.down()
    ch = checks(a, res)
    print_table(a, res)
    summary = {"checks": ch, "kill": res["kill"], "resume_at": res["resume_at"],
               "verify": res["verify"], "seconds": round(time.monotonic() - t0, 1)}
    with open(os.path.join(a.out, "demo_cluster_summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    al = ch["after_load"]
    print(f"\nrestart on n1 alone (TP2xDP1) from iteration {res['resume_at']}: after the load "
          f"{al['tensors_equal']}/{al['tensors']} tensors ({al['elements_in_equal_tensors']:,} "
          f"elements) fingerprint-equal to the committed 2-node checkpoint; loss max|diff| vs the "
          f"straight 2-node run {ch['resumed_max_abs_loss_diff']:.2e} (DP1 vs DP2: fp32 reduction "
          f"order); crashed run {ch['crash_losses_bitwise']}/{ch['crash_losses']} losses bitwise "
          f"= straight; {summary['seconds']} s. {'OK' if ch['ok'] else 'FAILED'}")
    return 0 if ch["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
