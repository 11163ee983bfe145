#!/usr/bin/env python3
# title: 回归 CI：golden 值、loss 曲线容差与状态指纹
# question: seeds/level8/M124.md
"""Two regression CIs on two training jobs.
(1) `ckpt train` (elementwise, bitwise deterministic across layouts): a golden
run records the layout-invariant fingerprint of its final checkpoint (`ckpt
fingerprint`: SHA-256 over every tensor in global row-major order, padding
excluded); candidates: a rerun, another layout (TP2xPP2 instead of TP1xDP2), a
peak LR off by 1e-4 relative; `ckpt diff` locates the tensors.
(2) The PyTorch training example (examples/torch_gpt, a real TP network), with
Megatron-style golden values: per-step loss of a golden TP1 run, checked
exactly (float bits) and approximately (|loss - golden| <= 5 % of golden, the
tolerance of Megatron's functional tests), and the fingerprint of its final
global tensors; candidates: a rerun at TP1, the same job at TP2, and the LR
regression (max LR x (1 + 1e-4)) at TP1. That is the deterministic path
(Megatron's deterministic functional tests compare exactly). The same golden,
rerun and LR regression again through the nondeterministic path
(--nondeterministic: the embedding gradient accumulated in a random order each
step, as a GPU's atomicAdd does): there reruns are not bitwise equal, which is
what the 5 % approximate test exists for.
Negative controls: a CI comparing checkpoint file bytes (false alarm on a
layout change), and the approximate loss-curve test on the LR regression
through the nondeterministic path (whether it misses it is measured, not
assumed)."""
import glob
import hashlib
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))
from scenlib import *  # noqa: F403,E402
import torch_gpt_job as tg  # noqa: E402

N = 20 if REDUCED else 30
T = ["--model", "tiny", "--seed", 9, "--steps", N]
must("golden", mpi("tp=1,dp=2", "train", "--root", path("golden"), *T, "--json"))
must("layout", mpi("tp=2,pp=2", "train", "--root", path("layout"), *T, "--json"))
must("regress", mpi("tp=1,dp=2", "train", "--root", path("regress"), *T, "--lr", "0.0010001", "--json"))
for c in ("golden", "layout", "regress"):
    must(f"fp_{c}", ck("fingerprint", path(c), "--json"))
for c in ("layout", "regress"):
    run_to(f"diff_{c}", ck("diff", path("golden"), path(c), "--json"))

# torch_gpt: golden TP1, rerun TP1, TP2, LR regression.
TN = 6 if REDUCED else 10
LR = 3e-3
TA = ["--model", "tiny", "--seed", 5, "--global-batch", 8, "--micro-batch", 4, "--steps", TN]
port = 29900 + os.getpid() % 90
LR_UP = ["--max-lr", repr(LR * (1 + 1e-4))]
ND = ["--nondeterministic"]
runs = (("t_golden", 1, []), ("t_rerun", 1, []), ("t_tp2", 2, []), ("t_lr", 1, LR_UP),
        ("n_golden", 1, ND), ("n_rerun", 1, ND), ("n_lr", 1, ND + LR_UP))
for name, tp, extra in runs:
    port += 1
    must(name, tg.argv(MPIRUN, PY, tp, "--tp", tp, *TA, *extra, "--log", path(f"{name}.jsonl"),
                       "--save-ref", path(f"{name}.pt"), port=port))


def file_digest(name):
    h = hashlib.sha256()
    for p in sorted(glob.glob(path(name, "iter_*", "*.h5"))):
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()


g = J("fp_golden")["digest"]
fp = {c: J(f"fp_{c}")["digest"] for c in ("layout", "regress")}
reg = J("diff_regress")
cand = {}
for name in ("t_rerun", "t_tp2", "t_lr", "n_rerun", "n_lr"):
    golden = name[0] + "_golden"  # each path against its own golden run
    gl, gt = tg.losses(path(f"{golden}.jsonl")), tg.tensors(path(f"{golden}.pt"))
    gfp = tg.fingerprint(gt)
    ls = tg.losses(path(f"{name}.jsonl"))
    ts = tg.tensors(path(f"{name}.pt"))
    exact = len(ls) == len(gl) and all(a["loss_hex"] == b["loss_hex"] for a, b in zip(ls, gl))
    rel = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(ls, gl))
    cmp_ = tg.compare(gt, ts)
    cand[name] = {"exact": exact, "approx": rel <= 0.05, "rel": rel, "fp": tg.fingerprint(ts) == gfp,
                  "max_rel": cmp_["max_rel"], "differing": cmp_["differing"]}
c_re, c_tp2, c_lr = cand["t_rerun"], cand["t_tp2"], cand["t_lr"]
n_re, n_lr = cand["n_rerun"], cand["n_lr"]
bytes_ = {c: file_digest(c) for c in ("golden", "layout")}
n = {"iterations": J("golden")["iteration"], "golden": g[:16],
     "layout_match": fp["layout"] == g, "regress_match": fp["regress"] == g,
     "diff_rc_layout": RC("diff_layout"), "diff_rc_regress": RC("diff_regress"),
     "regress_tensors": len(reg["tensors"]), "regress_compared": reg["tensors_compared"],
     "fingerprint_mb_per_s": round(J("fp_golden")["mb_per_s"]),
     "torch_steps": TN,
     "rerun_exact": c_re["exact"], "rerun_fingerprint": c_re["fp"],
     "tp2_exact": c_tp2["exact"], "tp2_approx": c_tp2["approx"], "tp2_fingerprint": c_tp2["fp"],
     "tp2_loss_rel": c_tp2["rel"], "tp2_state_max_rel": c_tp2["max_rel"],
     "lr_exact": c_lr["exact"], "lr_fingerprint": c_lr["fp"], "lr_loss_rel": c_lr["rel"],
     "lr_state_max_rel": c_lr["max_rel"],
     "nd_rerun_exact": n_re["exact"], "nd_rerun_fingerprint": n_re["fp"], "nd_rerun_state_max_rel": n_re["max_rel"],
     "nd_rerun_loss_rel": n_re["rel"], "nd_lr_exact": n_lr["exact"], "nd_lr_loss_rel": n_lr["rel"]}
nc = {"bytes_layout_match": bytes_["layout"] == bytes_["golden"],
      "bytes_false_alarm": bytes_["layout"] != bytes_["golden"] and fp["layout"] == g,
      "lr_approx_passes": c_lr["approx"], "lr_loss_rel": c_lr["rel"],
      "nd_lr_approx_passes": n_lr["approx"], "nd_rerun_approx_passes": n_re["approx"]}
checks = [
    ("ckpt train, other layout: fingerprint == golden, diff exit 0", fp["layout"] == g and RC("diff_layout") == 0),
    ("ckpt train, LR regression of 1e-4: fingerprint != golden, diff exit 1 naming tensors",
     fp["regress"] != g and RC("diff_regress") == 1 and len(reg["tensors"]) > 0),
    ("torch_gpt rerun at TP1: exact loss curve and fingerprint equal (bitwise deterministic)",
     c_re["exact"] and c_re["fp"]),
    ("torch_gpt LR regression: the exact loss test and the fingerprint both catch it",
     not c_lr["exact"] and not c_lr["fp"]),
    ("torch_gpt TP2: within the approximate tolerance", c_tp2["approx"]),
    ("nondeterministic path: a rerun's final state differs from its golden run's (not bitwise reproducible)",
     not n_re["fp"] and n_re["differing"] > 0),
]
emit("回归 CI：golden 值、loss 曲线容差与状态指纹",
     f"ckpt train tiny, {n['iterations']} iterations: golden TP1xDP2 vs TP2xPP2 and peak LR +1e-4; examples/torch_gpt "
     f"tiny, {TN} steps: golden TP1 vs rerun, TP2 and max LR x(1+1e-4)",
     n, checks,
     "布局无关的计算（ckpt train 逐元素模式）可以用状态指纹做精确 golden：换布局不误报、1e-4 的 LR 偏差被发现并定位；"
     "真实 TP 网络换 TP 后状态不再逐位相同（指纹报警），标量 loss 却可能仍逐位相同；精确 loss 测试与指纹都抓住 LR 回归，"
     "5% 的近似 loss 测试漏掉它——golden 要按布局分别保存，跨布局比较按张量的相对误差并按步数标定容差",
     "按 checkpoint 文件字节比较；以及非确定路径上 5% 近似 loss 曲线测试面对 LR 回归",
     nc, nc["bytes_false_alarm"] and nc["nd_lr_approx_passes"] and nc["nd_rerun_approx_passes"],
     headline="ckpt train：换布局指纹一致={layout_match}、LR+1e-4 一致={regress_match}，回归定位到 {regress_tensors}/{regress_compared} 个张量；"
              "torch_gpt {torch_steps} 步：重跑精确一致={rerun_exact}、指纹一致={rerun_fingerprint}；TP2 精确={tp2_exact}、近似={tp2_approx}"
              "（loss 相对差 {tp2_loss_rel:.1e}，状态相对差 {tp2_state_max_rel:.1e}）、指纹={tp2_fingerprint}；LR 回归精确={lr_exact}、"
              "指纹={lr_fingerprint}（loss 相对差 {lr_loss_rel:.1e}，状态相对差 {lr_state_max_rel:.1e}）；非确定路径：重跑 loss 精确一致="
              "{nd_rerun_exact}、指纹一致={nd_rerun_fingerprint}（状态相对差 {nd_rerun_state_max_rel:.1e}），LR 回归精确={nd_lr_exact}",
     headline_en="ckpt train: other layout fingerprint equal={layout_match}, LR+1e-4 equal={regress_match}, regression "
                 "located in {regress_tensors}/{regress_compared} tensors; torch_gpt {torch_steps} steps: rerun exact="
                 "{rerun_exact}, fingerprint={rerun_fingerprint}; TP2 exact={tp2_exact}, approx={tp2_approx} (loss "
                 "rel diff {tp2_loss_rel:.1e}, state rel diff {tp2_state_max_rel:.1e}), fingerprint={tp2_fingerprint}; LR "
                 "regression exact={lr_exact}, fingerprint={lr_fingerprint} (loss rel diff {lr_loss_rel:.1e}, state rel "
                 "diff {lr_state_max_rel:.1e}); nondeterministic path: rerun loss exact={nd_rerun_exact}, fingerprint="
                 "{nd_rerun_fingerprint} (state rel diff {nd_rerun_state_max_rel:.1e}), LR regression exact={nd_lr_exact}",
     nc_headline="换布局后文件字节一致={nc.bytes_layout_match} → 误报={nc.bytes_false_alarm}；5% 近似 loss 测试对 LR 回归通过="
                 "{nc.lr_approx_passes}（最大相对差 {nc.lr_loss_rel:.1e}），非确定路径上通过={nc.nd_lr_approx_passes}、对重跑通过="
                 "{nc.nd_rerun_approx_passes}",
     nc_headline_en="file bytes equal after a layout change={nc.bytes_layout_match} -> false alarm={nc.bytes_false_alarm}; "
                    "the 5% approximate loss test passes the LR regression={nc.lr_approx_passes} (max rel diff {nc.lr_loss_rel:.1e}), "
                    "on the nondeterministic path={nc.nd_lr_approx_passes}, and passes the rerun={nc.nd_rerun_approx_passes}")
