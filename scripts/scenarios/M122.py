#!/usr/bin/env python3
# title: NaN/Inf 守卫与回滚：不让坏状态成为 latest
# question: seeds/level8/M122.md
"""`ckpt train` with one NaN gradient injected at iteration 3N/4 (a transient
fault: tensor decoder.layers.0.mlp.linear_fc2.weight, element 100) and saves at
N/2 and N. Default policy: every rank scans its state before the vote and
refuses to commit non-finite values, so the tracker stays at N/2. Rollback:
resume from N/2 without the fault and compare with a clean straight run.
Negative control: --nonfinite allow - the poisoned state is committed, verifies
(its hashes are right) and becomes latest."""
from scenlib import *  # noqa: F403

N, L = (20, "tp=1,dp=2") if REDUCED else (40, "tp=2,dp=2")
H, BAD = N // 2, 3 * N // 4
T = ["--model", "tiny", "--seed", 5]
must("clean", mpi(L, "train", "--root", path("clean"), *T, "--steps", N, "--json"))
run_to("faulty", mpi(L, "train", "--root", path("guard"), *T, "--steps", N, "--save-at", H, "--inject-nan", BAD, "--json"))
tracker_after_fault = int(open(path("guard", "latest_checkpointed_iteration.txt")).read().strip())
must("rollback", mpi(L, "train", "--root", path("guard"), *T, "--steps", N, "--resume", "--json"))
must("rb_diff", ck("diff", path("clean"), path("guard"), "--json"))
run_to("allow", mpi(L, "train", "--root", path("allow"), *T, "--steps", N, "--save-at", H, "--inject-nan", BAD,
                    "--nonfinite", "allow", "--json"))
tracker_allow = int(open(path("allow", "latest_checkpointed_iteration.txt")).read().strip())
run_to("allow_verify", ck("verify", path("allow"), "--json"))
run_to("allow_diff", ck("diff", path("clean"), path("allow"), "--json"))

m = re.search(r"refusing to commit non-finite state: (.*?) at local flat index (\d+)", TXT("faulty"))
rb, rbd = J("rollback"), J("rb_diff")
ad, av = J("allow_diff"), J("allow_verify")
nan_tensors = [t["key"] for t in ad["tensors"] if t["max_ulp"] == "nan"]
n = {"iterations": rb["iteration"], "nan_at": BAD, "faulty_rc": RC("faulty"),
     "refused": bool(m), "refused_tensor": m.group(1).split("'")[1] if m else "",
     "tracker_after_fault": tracker_after_fault, "rollback_from": rb["resumed"]["iteration"],
     "rollback_tensors_differing": len(rbd["tensors"]), "rollback_max_ulp": rbd["max_ulp"]}
nc = {"allow_rc": RC("allow"), "tracker": tracker_allow, "verify_ok": av.get("ok", False),
      "nan_tensors": len(nan_tensors), "tensors_differing": len(ad["tensors"])}
checks = [
    ("the faulty job fails and names the tensor holding NaN", RC("faulty") != 0 and bool(m)),
    ("the tracker stays at the last finite checkpoint", tracker_after_fault == H),
    ("rollback + replay == clean run, bit for bit", rbd["same"]),
]
emit("NaN/Inf 守卫与回滚：不让坏状态成为 latest",
     f"ckpt train tiny {J('clean')['layout']}, {n['iterations']} iterations, saves at {H} and {n['iterations']}, one "
     f"NaN gradient at iteration {BAD}",
     n, checks,
     "提交前每个 rank 扫描自己的状态，发现 NaN/Inf 就在投票中否决：坏状态永远不会成为 latest；回滚到最后一个有限检查点、跳过瞬时故障重放，"
     "结果与无故障运行逐位一致",
     "--nonfinite allow：不检查就提交",
     nc, nc["tracker"] == n["iterations"] and nc["verify_ok"] and nc["nan_tensors"] > 0,
     headline="第 {nan_at} 步注入 NaN：保存被拒（rc={faulty_rc}，指出 {refused_tensor}），tracker 停在 {tracker_after_fault}；"
              "从 {rollback_from} 回滚重放后与无故障运行 {rollback_tensors_differing} 个张量不同（max ulp {rollback_max_ulp}）",
     headline_en="NaN injected at step {nan_at}: save refused (rc={faulty_rc}, naming {refused_tensor}), tracker stays "
                 "at {tracker_after_fault}; rollback to {rollback_from} and replay vs the clean run: "
                 "{rollback_tensors_differing} tensors differ (max ulp {rollback_max_ulp})",
     nc_headline="坏状态被提交为 latest（tracker={nc.tracker}），verify 通过={nc.verify_ok}，{nc.nan_tensors} 个张量含 NaN",
     nc_headline_en="the poisoned state became latest (tracker={nc.tracker}), verify ok={nc.verify_ok}, "
                    "{nc.nan_tensors} tensors hold NaN")
