#!/usr/bin/env python3
# title: TP reshard：fused QKV(GQA)、SwiGLU fc1 [W;V]、vocab padding
# question: seeds/level8/M113.md
"""A TP4 job saves; TP2, TP1 and TP8 jobs load it (every element checked,
padded vocab rows must be zero); offline reshards to TP1/TP8 show which global
shapes depend on TP (padded vocab) and which do not (QKV, fc1); the planner
refuses TP16 because ng=8 query groups cannot be split 16 ways in this tool
(MCore >= 0.16 can run TP > ng when TP % ng == 0 - see the question).
Measured also: planned read bytes of a TP4 -> TP2 load vs the checkpoint's.
Negative control: fc1 registered as a naive axis-0 slice of the local
[W_r; V_r] (--naive-fc1) round-trips at TP4 but is wrong at TP2."""
from scenlib import *  # noqa: F403

MODEL = model() if REDUCED else model("vocab_size=16385")  # odd V: padding differs per TP
R = path("tp4")
must("save", mpi("tp=4", "save", "--root", R, "--iter", 200, "--model", MODEL, "--json"))
must("ins4", ck("inspect", R, "--json"))
for tp in (2, 1, 8):
    must(f"load{tp}", mpi(f"tp={tp}", "load", "--root", R, "--json"))
for tp in (1, 8):
    must(f"rs{tp}", ck("reshard", R, path(f"tp{tp}"), "--to", f"tp={tp}", "--json"))
    must(f"ins{tp}", ck("inspect", path(f"tp{tp}"), "--json"))
must("plan2", ck("plan", R, "--to", "tp=2", "--per-rank", "--json"))
run_to("plan16", ck("plan", R, "--to", "tp=16"))
# Negative control.
must("nsave", mpi("tp=4", "save", "--root", path("naive"), "--iter", 200, "--model", MODEL, "--naive-fc1", "--json"))
run_to("nload4", mpi("tp=4", "load", "--root", path("naive"), "--naive-fc1", "--json"))
run_to("nload2", mpi("tp=2", "load", "--root", path("naive"), "--naive-fc1", "--json"))


def shape(ins, key):
    return next(t["global_shape"] for t in ins["tensors"] if t["key"] == key)


ins = {tp: J(f"ins{tp}") for tp in (4, 1, 8)}
meta = ins[4]["metadata"]["model"]["config"]
V, ng, np_ = meta["vocab_size"], meta["num_query_groups"], meta["num_heads"]
emb = "embedding.word_embeddings.weight"
qkv = "decoder.layers.0.self_attention.linear_qkv.weight"
fc1 = "decoder.layers.0.mlp.linear_fc1.weight"
loads = {tp: J(f"load{tp}") for tp in (2, 1, 8)}
fc1_elems = sum(t["bytes"] // 2 for t in ins[4]["tensors"] if t["key"].endswith("mlp.linear_fc1.weight"))
plan = J("plan2")
n = {
    "vocab": V,
    "padded_tp1": shape(ins[1], emb)[0], "padded_tp4": shape(ins[4], emb)[0], "padded_tp8": shape(ins[8], emb)[0],
    "qkv_rows_tp1": shape(ins[1], qkv)[0], "qkv_rows_tp4": shape(ins[4], qkv)[0], "qkv_rows_tp8": shape(ins[8], qkv)[0],
    "fc1_rows": shape(ins[4], fc1)[0],
    "elements_tp2": loads[2]["elements_checked"], "mismatch_tp2": loads[2]["mismatches"],
    "elements_tp1": loads[1]["elements_checked"], "mismatch_tp1": loads[1]["mismatches"],
    "elements_tp8": loads[8]["elements_checked"], "mismatch_tp8": loads[8]["mismatches"],
    "plan_tp2_bytes_read": plan["bytes_read_total"], "checkpoint_bytes": plan["checkpoint_bytes"],
    "plan_tp2_read_over_checkpoint": round(plan["bytes_read_total"] / plan["checkpoint_bytes"], 3),
    "tp16_refused_rc": RC("plan16"),
}


def padded(tp, d=meta["make_vocab_size_divisible_by"]):
    m = d * tp
    return (V + m - 1) // m * m


n4, n2 = J("nload4"), J("nload2")
nc = {
    "naive_same_tp_mismatches": n4["mismatches"],
    "naive_tp2_mismatches": n2["mismatches"],
    "naive_tp2_first": n2["first_mismatch"],
    "fc1_elements": fc1_elems,
    "naive_tp2_bad_fraction": round(n2["mismatches"] / fc1_elems, 3),
}
checks = [
    ("TP2/TP1/TP8 loads: 0 mismatches over every element",
     all(ld["mismatches"] == 0 and ld["elements_checked"] > 0 for ld in loads.values())),
    ("padded vocab = ceil(V/(128*tp))*128*tp at TP1/4/8",
     (n["padded_tp1"], n["padded_tp4"], n["padded_tp8"]) == (padded(1), padded(4), padded(8))),
    ("QKV global rows independent of TP = ng*(np/ng+2)*hn",
     n["qkv_rows_tp1"] == n["qkv_rows_tp4"] == n["qkv_rows_tp8"]
     == ng * (np_ // ng + 2) * (meta["kv_channels"] or meta["hidden"] // np_)),
    ("TP16 refused by this tool's planner (ng % tp != 0) with a message naming num_query_groups",
     RC("plan16") == 2 and "num_query_groups" in TXT("plan16")),
]
emit("TP reshard：fused QKV(GQA)、SwiGLU fc1 [W;V]、vocab padding",
     f"{J('save')['model']} (V={V}, np={np_}, ng={ng}) saved at TP4, loaded at TP2/TP1/TP8",
     n, checks,
     "全局张量与 TP 无关（QKV 按整 query group 切，fc1 全局为 [W_0..W_{tp-1}; V_0..V_{tp-1}]），只有 vocab padding 随 TP 变："
     "加载读重叠部分、多出的 padding 补零、多余行丢弃；本工具对 ng % tp != 0 在规划阶段拒绝",
     "--naive-fc1：把本地 [W_r; V_r] 当作 axis-0 的普通切片保存",
     nc,
     n4["mismatches"] == 0 and n2["mismatches"] > 0 and "linear_fc1" in n2["first_mismatch"],
     headline="TP4→TP2/TP1/TP8 逐元素 {mismatch_tp2}/{mismatch_tp1}/{mismatch_tp8} mismatch（{elements_tp8} 元素@TP8）；"
              "vocab {vocab} padding TP1/4/8 = {padded_tp1}/{padded_tp4}/{padded_tp8}；QKV 行数恒为 {qkv_rows_tp4}；"
              "TP2 规划读 {plan_tp2_bytes_read} B = 检查点 {checkpoint_bytes} B 的 {plan_tp2_read_over_checkpoint} 倍；"
              "TP16 规划拒绝 rc={tp16_refused_rc}",
     headline_en="TP4 -> TP2/TP1/TP8 element-wise {mismatch_tp2}/{mismatch_tp1}/{mismatch_tp8} mismatches "
                 "({elements_tp8} elements at TP8); vocab {vocab} padded at TP1/4/8 = {padded_tp1}/{padded_tp4}/"
                 "{padded_tp8}; QKV rows always {qkv_rows_tp4}; TP2 plan reads {plan_tp2_bytes_read} B = "
                 "{plan_tp2_read_over_checkpoint}x the checkpoint's {checkpoint_bytes} B; TP16 plan refused rc={tp16_refused_rc}",
     nc_headline="同 TP4 重载 {nc.naive_same_tp_mismatches} mismatch（bug 不可见），TP2 重载 {nc.naive_tp2_mismatches} 个元素错"
                 "（fc1 的 {nc.naive_tp2_bad_fraction}），首个在 {nc.naive_tp2_first}",
     nc_headline_en="same-TP4 reload {nc.naive_same_tp_mismatches} mismatches (bug invisible); TP2 reload "
                    "{nc.naive_tp2_mismatches} wrong elements ({nc.naive_tp2_bad_fraction} of fc1), first at {nc.naive_tp2_first}")
