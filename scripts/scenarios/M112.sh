#!/usr/bin/env bash
# title: 分布式优化器状态跨 DP 变化恢复
# question: seeds/level8/M112.md
# A DP4 job with a Megatron-Core distributed optimizer (fp32 main param,
# exp_avg, exp_avg_sq; buffers in reverse param order, 64-element aligned
# starts, buckets padded to lcm(dp, 128), DP rank r owns slice r of every
# bucket) saves its optimizer state twice: in model space (each owned piece of
# each parameter is a flat-range fragment of that parameter's box) and in
# bucket space (raw per-rank bucket slices). Loads: model space at DP2, DP3
# (other padding) and TP2xDP2; bucket space at the same DP4. Every model and
# optimizer element is checked.
# Negative control: the bucket-space checkpoint loaded by a DP2 job (the usual
# "DP size changed after a node loss" resume).
# shellcheck source=lib.sh
source "${SCENARIO_LIB:-$(dirname "$0")/lib.sh}"
MODEL=$(model hidden=512,ffn_hidden=1408)
BUCKET=2000000
((REDUCED)) && { MODEL=tiny; BUCKET=40000; }
M=$SCRATCH/model B=$SCRATCH/bucket
L=tp=1,dp=4

must msave mpi $L save --root "$M" --iter 400 --model "$MODEL" --optimizer model --bucket-elems $BUCKET --json
must bsave mpi $L save --root "$B" --iter 400 --model "$MODEL" --optimizer bucket --bucket-elems $BUCKET --json
must mins "$CKPT" inspect "$M" --json
must bins "$CKPT" inspect "$B" --json
must dp2 mpi tp=1,dp=2 load --root "$M" --json
must dp3 mpi tp=1,dp=3 load --root "$M" --json
must tp2dp2 mpi tp=2,dp=2 load --root "$M" --json
must same mpi $L load --root "$B" --json
must msame mpi $L load --root "$M" --json
run_to bdp2 mpi tp=1,dp=2 load --root "$B" --json

py <<'EOF'
mins, bins = J("mins"), J("bins")
msave, bsave = J("msave"), J("bsave")
model_elems = sum(t["bytes"] // 2 for t in mins["tensors"] if not t["key"].startswith("optimizer."))
model_params = sum(1 for t in mins["tensors"] if not t["key"].startswith("optimizer."))
frag = [t for t in mins["tensors"] if t["key"].startswith("optimizer.state.exp_avg.")]
fragments = sum(t["shards"] for t in frag)
buckets = [t for t in bins["tensors"] if t["key"].endswith(".exp_avg") and ".bucket_idx_" in t["key"]]
bucket_elems = sum(t["global_shape"][0] for t in buckets)
loads = {k: J(k) for k in ("dp2", "dp3", "tp2dp2", "same", "msame")}
n = {
    "params": model_params, "param_elements": model_elems,
    "model_space_fragments": fragments,
    "buckets": len(buckets), "bucket_elements": bucket_elems, "bucket_padding": bucket_elems - model_elems,
    "opt_bytes_per_rank_max": msave["max_rank_bytes"], "opt_bytes_per_rank_min": msave["min_rank_bytes"],
    "model_save_s": round(msave["seconds"], 3), "bucket_save_s": round(bsave["seconds"], 3),
    "model_load_same_s": round(loads["msame"]["seconds"], 3), "bucket_load_same_s": round(loads["same"]["seconds"], 3),
}
for k, l in loads.items():
    n[f"{k}_opt_elements"] = l["optimizer_elements_checked"]
    n[f"{k}_opt_mismatches"] = l["optimizer_mismatches"]
    n[f"{k}_mismatches"] = l["mismatches"]
refused = RC("bdp2") != 0 and "data-parallel size" in TXT("bdp2")
nc = {"bucket_dp2_rc": RC("bdp2"), "bucket_dp2_refused": refused,
      "reason": "data-parallel size 4 vs 2" if "data-parallel size is 4, this job's is 2" in TXT("bdp2") else ""}
checks = [(f"{k}: model + optimizer 0 mismatches, optimizer elements checked",
           l["mismatches"] == 0 and l["optimizer_mismatches"] == 0 and l["optimizer_elements_checked"] > 0)
          for k, l in loads.items()]
checks += [
    ("some parameters straddle a DP slice boundary (fragments > params)", fragments > model_params),
    ("every bucket is padded to a multiple of lcm(dp=4, 128) and holds every param element",
     all(t["global_shape"][0] % 128 == 0 for t in buckets) and bucket_elems >= model_elems),
]
emit("分布式优化器状态跨 DP 变化恢复",
     f"{msave['model']} DP4 distributed optimizer (Adam fp32 param/exp_avg/exp_avg_sq, model space and bucket space); "
     "loads at DP2, DP3, TP2xDP2",
     n, checks,
     "DP rank r 只拥有每个 bucket 的第 r 段；按参数的 flat-range 片段（model space）保存后，换 DP（含 padding 随 lcm(dp,128) 改变的 DP3）甚至换 TP 都能逐元素恢复；"
     "原始 bucket 切片（bucket space）只适合同布局快速恢复",
     "bucket-space 检查点由 DP2 作业加载",
     nc, refused,
     headline="{params} 个参数在 DP4 下切成 {model_space_fragments} 个 flat-range 片段/状态；{buckets} 个 bucket 共 {bucket_elements} 元素"
              "（padding {bucket_padding}）；DP2/DP3/TP2xDP2 优化器 {dp2_opt_mismatches}/{dp3_opt_mismatches}/{tp2dp2_opt_mismatches} mismatch"
              "（DP3 检查 {dp3_opt_elements} 元素）；同布局加载 model {model_load_same_s} s vs bucket {bucket_load_same_s} s",
     nc_headline="rc={nc.bucket_dp2_rc}，拒绝加载（{nc.reason}）：raw slice 的归属随 DP 改变，不能直接恢复")
EOF
