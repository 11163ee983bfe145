#!/usr/bin/env python3
# title: 逐位续训：checkpoint 必须保存哪些状态
# question: seeds/level8/M119.md
"""`ckpt train` (deterministic GPT workload: bf16 params derived from fp32 main
params, Adam, LR schedule, Megatron pretraining sampler, counter-based RNG) runs
N iterations straight; a second job runs N/2, saves, and is SIGKILLed right
after the commit; a third job resumes it to N. The two final checkpoints are
compared element by element (`ckpt diff`) and by their layout-invariant
fingerprints.
Negative controls: the same kill/resume without the RNG state, and without the
data-iterator state."""
from scenlib import *  # noqa: F403

N, L = (20, "tp=1,dp=2") if REDUCED else (40, "tp=2,dp=2")
H = N // 2
T = ["--model", "tiny", "--seed", 7]
must("straight", mpi(L, "train", "--root", path("a"), *T, "--steps", N, "--json"))
run_to("killed", mpi(L, "train", "--root", path("b"), *T, "--steps", N, "--save-at", H, "--kill-after-save", "--json"))
must("resumed", mpi(L, "train", "--root", path("b"), *T, "--steps", N, "--resume", "--json"))
must("diff", ck("diff", path("a"), path("b"), "--json"))
must("fpa", ck("fingerprint", path("a"), "--json"))
must("fpb", ck("fingerprint", path("b"), "--json"))
must("insb", ck("inspect", path("b"), "--json"))
for part in ("rng", "iterator"):
    must(f"k_{part}", mpi(L, "train", "--root", path(part), *T, "--steps", H, f"--no-{part}-state", "--json"))
    must(f"r_{part}", mpi(L, "train", "--root", path(part), *T, "--steps", N, "--resume", f"--no-{part}-state", "--json"))
    run_to(f"d_{part}", ck("diff", path("a"), path(part), "--json"))

d, fa, fb, ins, res = J("diff"), J("fpa"), J("fpb"), J("insb"), J("resumed")
objs = sorted(o["key"] for o in ins["objects"])


def ctl(part):
    x = J(f"d_{part}")
    return x["same"], len(x["tensors"]), x["max_ulp"]


rng_same, rng_t, rng_ulp = ctl("rng")
it_same, it_t, it_ulp = ctl("iterator")
r_it = J("r_iterator")
n = {
    "iterations": res["iteration"], "resumed_from": res["resumed"]["iteration"],
    "killed_rc": RC("killed"), "tensors_compared": d["tensors_compared"], "objects_compared": d["objects_compared"],
    "tensors_differing": len(d["tensors"]), "max_ulp": d["max_ulp"],
    "fingerprint_equal": fa["digest"] == fb["digest"], "fingerprint": fa["digest"][:16],
    "resume_objects": ",".join(objs), "consumed_samples": res["consumed_samples"],
}
nc = {"no_rng_tensors_differing": rng_t, "no_rng_max_ulp": rng_ulp, "no_iter_tensors_differing": it_t,
      "no_iter_max_ulp": it_ulp, "no_iter_consumed_samples": r_it["consumed_samples"]}
checks = [
    ("the killed job committed its mid-point save first", RC("killed") != 0 and res["resumed"]["iteration"] == H),
    ("kill + resume == straight run, bit for bit (every tensor and object)", d["same"] and not d["tensors"]),
    ("layout-invariant fingerprints equal", fa["digest"] == fb["digest"]),
    ("data: every sample consumed exactly once", res["samples_exactly_once"] and res["consumed_matches_iterations"]),
]
emit("逐位续训：checkpoint 必须保存哪些状态",
     f"ckpt train tiny, {J('straight')['layout']}, {res['iteration']} iterations straight vs SIGKILL after the save at "
     f"{res['resumed']['iteration']} + resume",
     n, checks,
     "逐位续训需要：fp32 main param + Adam 两个矩 + step、bf16 参数（由 fp32 舍入得到，可校验）、LR scheduler、数据迭代器（consumed_samples）、RNG 状态与全部参数；"
     "缺 RNG 或迭代器任何一项，续训结果都不再逐位一致",
     "续训时不保存/不加载 RNG 状态，或不保存/不加载数据迭代器状态",
     nc, (not rng_same) and (not it_same),
     headline="{iterations} 步直跑 vs 第 {resumed_from} 步 SIGKILL 后续训：{tensors_compared} 个张量 + {objects_compared} 个对象中 "
              "{tensors_differing} 个不同（max ulp {max_ulp}），指纹相同={fingerprint_equal}；检查点里的续训对象：{resume_objects}",
     headline_en="{iterations} steps straight vs SIGKILL at {resumed_from} + resume: {tensors_differing} of "
                 "{tensors_compared} tensors + {objects_compared} objects differ (max ulp {max_ulp}), fingerprints "
                 "equal={fingerprint_equal}; resume objects in the checkpoint: {resume_objects}",
     nc_headline="无 RNG 状态：{nc.no_rng_tensors_differing} 个张量不同（max ulp {nc.no_rng_max_ulp}）；"
                 "无迭代器状态：{nc.no_iter_tensors_differing} 个张量不同，consumed_samples 只有 {nc.no_iter_consumed_samples}",
     nc_headline_en="without RNG state {nc.no_rng_tensors_differing} tensors differ (max ulp {nc.no_rng_max_ulp}); "
                    "without iterator state {nc.no_iter_tensors_differing} differ, consumed_samples only "
                    "{nc.no_iter_consumed_samples}")
