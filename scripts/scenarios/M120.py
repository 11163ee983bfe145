#!/usr/bin/env python3
# title: 跨布局续训的数值：布局无关的计算 vs 真实 TP 前向链
# question: seeds/level8/M120.md
"""Two training jobs, two kinds of numerics.
(1) `ckpt train` (elementwise): every update is a function of (global element
index, step, seed) only - layout invariant by construction. Half the run at
TP1xDP2, the rest resumed at TP2xPP2, vs the whole run at TP1xDP2: bitwise?
(2) The PyTorch training example (examples/torch_gpt: Megatron-style TP with
column/row-parallel linears, the row-parallel output all-reduce in the forward,
vocab-parallel cross entropy, DP gradient all-reduce, AdamW). From one state
saved at TP1 after TH steps (global tensors), one more step is taken at TP1
and at TP2. Measured: after ONE step at another TP, how many tensors differ
and by how much; the loss of that step. (Same-layout resume is bitwise: M119.)
Both one-step jobs hash every point of that step's forward pass (the
activations gathered to global form, examples/torch_gpt/probe.py): the first
point whose hash differs is where TP2's arithmetic departs from TP1's.
Negative control: the real TP network resumed at another TP - not bitwise,
and the difference is in every kind of tensor after one step (the forward's
all-reduce changes the activations, hence every gradient), not only in
row-parallel weights."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "helpers"))
from scenlib import *  # noqa: F403,E402
import torch  # noqa: E402
import torch_gpt_job as tg  # noqa: E402

sys.path.insert(0, tg.EXAMPLES)
from torch_gpt import probe  # noqa: E402

N = 20 if REDUCED else 40
H = N // 2
T = ["--model", "tiny", "--seed", 11]


def tr(name, layout, root, *extra):
    must(name, mpi(layout, "train", "--root", path(root), *T, *extra, "--json"))


tr("e_ref", "tp=1,dp=2", "e_ref", "--steps", N)
tr("e_half", "tp=1,dp=2", "e_x", "--steps", H)
tr("e_res", "tp=2,pp=2", "e_x", "--steps", N, "--resume")
must("e_diff", ck("diff", path("e_ref"), path("e_x"), "--json"))

# The real forward chain: torch_gpt at TP1 for TH steps, then one step at TP1 and at TP2.
TH = 4 if REDUCED else 8
TA = ["--model", "tiny", "--seed", 5, "--global-batch", 8, "--micro-batch", 4]
port = 29600 + os.getpid() % 300
must("t_half", tg.argv(MPIRUN, PY, 1, "--tp", 1, "--steps", TH, *TA, "--save-ref", path("h.pt"), port=port))
for name, tp, np_ in (("t_tp1", 1, 1), ("t_tp2", 2, 2)):
    port += 1
    must(name, tg.argv(MPIRUN, PY, np_, "--tp", tp, "--steps", TH + 1, *TA, "--load-ref", path("h.pt"),
                       "--save-ref", path(f"{name}.pt"), "--log", path(f"{name}.jsonl"),
                       "--hash-activations", path(f"{name}.act"), port=port))

e = J("e_diff")
t1, t2 = (tg.tensors(path(f"{k}.pt")) for k in ("t_tp1", "t_tp2"))
cross = tg.compare(t1, t2)
kinds = {"qkv": "linear_qkv", "proj (row-parallel)": "linear_proj", "fc1": "linear_fc1",
         "fc2 (row-parallel)": "linear_fc2", "embedding": "word_embeddings", "norm": "norm"}
kinds_differing = sorted(k for k, pat in kinds.items() if any(pat in key and not torch.equal(t1[key], t2[key])
                                                             for key in t1))
act1, act2 = (probe.read(path(f"{k}.act"))[TH + 1] for k in ("t_tp1", "t_tp2"))
act_equal, act_first = probe.first_difference(act1, act2)
loss1, loss2 = tg.losses(path("t_tp1.jsonl"))[-1], tg.losses(path("t_tp2.jsonl"))[-1]
n = {
    "iterations": J("e_res")["iteration"],
    "elementwise_cross_layout_differing": len(e["tensors"]), "elementwise_max_ulp": e["max_ulp"],
    "torch_resume_at": TH,
    "torch_tensors": cross["tensors"],
    "torch_loss_tp1_hex": loss1["loss_hex"], "torch_loss_tp2_hex": loss2["loss_hex"],
    "torch_loss_equal": loss1["loss_hex"] == loss2["loss_hex"],
}
nc = {"tp2_tensors_differing": cross["differing"], "tp2_kinds_differing": ",".join(kinds_differing),
      "tp2_max_abs": cross["max_abs"], "tp2_max_rel": cross["max_rel"],
      "tp2_loss_abs_diff": abs(loss1["loss"] - loss2["loss"]),
      "act_points": len(act1), "act_equal_before_first_diff": act_equal, "act_first_diff": act_first,
      "act_points_differing": sum(a != b for a, b in zip(act1, act2)),
      "logits_equal": act1[-1] == act2[-1]}
checks = [
    ("elementwise: resume at TP2xPP2 of a TP1xDP2 run == straight run, bit for bit", e["same"]),
    ("activation hashes: the forward passes agree up to the first row-parallel output (embedding, norm, "
     "column-parallel qkv bitwise equal), and the first difference is there",
     act_first.endswith(("linear_proj", "linear_fc2")) and act_equal >= 3 and act1[0] == act2[0]),
    ("torch_gpt: both one-step jobs resumed from the same TP1 state",
     tg.losses(path("t_tp1.jsonl"))[0]["iteration"] == TH + 1 == tg.losses(path("t_tp2.jsonl"))[0]["iteration"]),
]
emit("跨布局续训的数值：布局无关的计算 vs 真实 TP 前向链",
     f"ckpt train tiny elementwise, {n['iterations']} iterations, TP1xDP2 → resume TP2xPP2; examples/torch_gpt tiny, "
     f"state after {TH} steps at TP1, one more step at TP1 and at TP2",
     n, checks,
     "只有计算本身与布局无关（逐元素更新 + 以全局元素下标为键的计数器 RNG）时，换布局续训才逐位一致；真实的 TP 网络在前向里对 row-parallel 输出做 all-reduce、"
     "TP 还改变每个 GEMM 的 K 切分，fp32 求和顺序随之改变：从同一个状态换 TP 走一步，所有种类的张量（不止 row-parallel 权重）都已经不同；固定布局下续训仍是逐位的",
     "真实 TP 网络（examples/torch_gpt）从同一状态在 TP2 上走一步",
     nc, nc["tp2_tensors_differing"] > 0 and "qkv" in nc["tp2_kinds_differing"] and "embedding" in nc["tp2_kinds_differing"],
     headline="逐元素模式跨布局续训 {elementwise_cross_layout_differing} 个张量不同；"
              "第 {torch_resume_at} 步后的一步 loss：TP1 {torch_loss_tp1_hex} vs TP2 {torch_loss_tp2_hex}",
     headline_en="elementwise mode resumed across layouts: {elementwise_cross_layout_differing} tensors differ; torch_gpt "
                 "loss of the step after "
                 "{torch_resume_at}: TP1 {torch_loss_tp1_hex} vs TP2 {torch_loss_tp2_hex}",
     nc_headline="该步前向 {nc.act_points} 个激活点中前 {nc.act_equal_before_first_diff} 个逐位相同，首个不同在 {nc.act_first_diff}"
                 "（logits 相同={nc.logits_equal}）；TP2 走一步后 {nc.tp2_tensors_differing}/{torch_tensors} 个张量不同（种类 {nc.tp2_kinds_differing}），"
                 "max abs {nc.tp2_max_abs:.2e}、相对 {nc.tp2_max_rel:.2e}",
     nc_headline_en="of the step's {nc.act_points} forward activation points the first {nc.act_equal_before_first_diff} are "
                    "bitwise equal, the first difference is at {nc.act_first_diff} (logits equal={nc.logits_equal}); "
                    "one step at TP2: {nc.tp2_tensors_differing}/{torch_tensors} tensors differ (kinds "
                    "{nc.tp2_kinds_differing}), max abs {nc.tp2_max_abs:.2e}, relative {nc.tp2_max_rel:.2e}")
