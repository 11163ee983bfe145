#!/usr/bin/env bash
# title: TP reshard：fused QKV(GQA)、SwiGLU fc1 [W;V]、vocab padding
# question: seeds/level8/M113.md
# A TP4 job saves; TP2, TP1 and TP8 jobs load it (every element checked,
# padded vocab rows must be zero); offline reshards to TP1/TP8 show which
# global shapes depend on TP (padded vocab) and which do not (QKV, fc1); the
# planner refuses TP16 because ng=8 query groups cannot be split 16 ways.
# Negative control: fc1 registered as a naive axis-0 slice of the local
# [W_r; V_r] (--naive-fc1) round-trips at TP4 but is wrong at TP2.
# shellcheck source=lib.sh
source "${SCENARIO_LIB:-$(dirname "$0")/lib.sh}"
MODEL=$(model)
((REDUCED)) || MODEL=$(model vocab_size=16385)  # odd V: padding differs per TP
R=$SCRATCH/tp4

must save mpi tp=4 save --root "$R" --iter 200 --model "$MODEL" --json
must ins4 "$CKPT" inspect "$R" --json
for tp in 2 1 8; do must "load$tp" mpi "tp=$tp" load --root "$R" --json; done
for tp in 1 8; do
  must "rs$tp" "$CKPT" reshard "$R" "$SCRATCH/tp$tp" --to "tp=$tp" --json
  must "ins$tp" "$CKPT" inspect "$SCRATCH/tp$tp" --json
done
must plan2 "$CKPT" plan "$R" --to tp=2 --per-rank --json
run_to plan16 "$CKPT" plan "$R" --to tp=16
# Negative control.
must nsave mpi tp=4 save --root "$SCRATCH/naive" --iter 200 --model "$MODEL" --naive-fc1 --json
run_to nload4 mpi tp=4 load --root "$SCRATCH/naive" --naive-fc1 --json
run_to nload2 mpi tp=2 load --root "$SCRATCH/naive" --naive-fc1 --json

py <<'EOF'
def shape(ins, key):
    return next(t["global_shape"] for t in ins["tensors"] if t["key"] == key)
ins = {tp: J(f"ins{tp}") for tp in (4, 1, 8)}
meta = ins[4]["metadata"]["gpt"]
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
     all(l["mismatches"] == 0 and l["elements_checked"] > 0 for l in loads.values())),
    ("padded vocab = ceil(V/(128*tp))*128*tp at TP1/4/8",
     (n["padded_tp1"], n["padded_tp4"], n["padded_tp8"]) == (padded(1), padded(4), padded(8))),
    ("QKV global rows independent of TP = ng*(np/ng+2)*hn",
     n["qkv_rows_tp1"] == n["qkv_rows_tp4"] == n["qkv_rows_tp8"]
     == ng * (np_ // ng + 2) * (meta["kv_channels"] or meta["hidden"] // np_)),
    ("TP16 refused (ng % tp != 0) with a message naming num_query_groups",
     RC("plan16") == 2 and "num_query_groups" in TXT("plan16")),
]
emit("TP reshard：fused QKV(GQA)、SwiGLU fc1 [W;V]、vocab padding",
     f"{J('save')['model']} (V={V}, np={np_}, ng={ng}) saved at TP4, loaded at TP2/TP1/TP8",
     n, checks,
     "全局张量与 TP 无关（QKV 按整 query group 切，fc1 全局为 [W_0..W_{tp-1}; V_0..V_{tp-1}]），只有 vocab padding 随 TP 变："
     "加载读重叠部分、多出的 padding 补零、多余行丢弃；ng % tp != 0 在规划阶段就拒绝",
     "--naive-fc1：把本地 [W_r; V_r] 当作 axis-0 的普通切片保存",
     nc,
     n4["mismatches"] == 0 and n2["mismatches"] > 0 and "linear_fc1" in n2["first_mismatch"],
     headline="TP4→TP2/TP1/TP8 逐元素 {mismatch_tp2}/{mismatch_tp1}/{mismatch_tp8} mismatch（{elements_tp8} 元素@TP8）；"
              "vocab {vocab} padding TP1/4/8 = {padded_tp1}/{padded_tp4}/{padded_tp8}；QKV 行数恒为 {qkv_rows_tp4}；TP16 规划拒绝 rc={tp16_refused_rc}",
     nc_headline="同 TP4 重载 {nc.naive_same_tp_mismatches} mismatch（bug 不可见），TP2 重载 {nc.naive_tp2_mismatches} 个元素错"
                 "（fc1 的 {nc.naive_tp2_bad_fraction}），首个在 {nc.naive_tp2_first}")
EOF
