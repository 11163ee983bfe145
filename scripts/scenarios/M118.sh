#!/usr/bin/env bash
# title: 异步保存：一致性与阻塞时间
# question: seeds/level8/M118.md
# `ckpt train --async-save` (AsyncSaver on its own MPI communicator, needs
# MPI_THREAD_MULTIPLE): training blocks only for the snapshot copy, the
# background thread runs the full commit protocol. Measured:
#  - consistency: a job saves iteration K asynchronously and trains on to N;
#    the test hook --async-delay-ms holds the background save until training
#    has overwritten its buffers N-K times. Its iteration-K checkpoint is
#    compared with a synchronous save at K of an identical job (`ckpt diff`,
#    fingerprints), and resuming from it to N with a straight run to N;
#  - blocking time: saves every E iterations without the delay: blocking
#    (wait for the previous + snapshot) per save vs a memcpy of the same bytes
#    in the same process (cold: fresh memory, warm: reused), background total;
#  - overlap: saves at K, K+1, K+2 with a delay longer than a step: each next
#    Start waits for the previous, commits in order, tracker at the last;
#  - crash: a rank _exit()s in the background save of the second save (fault
#    plan --faults): the first stays latest, verifies and resumes bit for bit.
# Negative control: --async-no-snapshot (the background save reads the live
# training buffers): the iteration-K checkpoint holds later values.
# shellcheck source=lib.sh
source "${SCENARIO_LIB:-$(dirname "$0")/lib.sh}"
N=40 L=tp=2,dp=2 D=3000
# Blocking time needs a state larger than the caches (a ~200 MB/rank model at
# full size: 2 layers, hidden 512, vocab 8000; TN steps, a save after each).
TM=demo:num_layers=2,hidden=512,ffn_hidden=1408,num_heads=8,num_query_groups=4,vocab_size=8000 TN=4 E=1
((REDUCED)) && { N=20; L=tp=1,dp=2; D=1500; TM=tiny; TN=20; E=5; }
K=$((N / 2)) K1=$((N / 4))
export N K E K1 D TM
T=(--model tiny --seed 11)
A=(--async-save --async-delay-ms "$D")

# Consistency: sync save at K vs async save at K (+ training to N meanwhile).
must sync mpi $L train --root "$SCRATCH/sync" "${T[@]}" --steps $K --json
must straight mpi $L train --root "$SCRATCH/straight" "${T[@]}" --steps $N --json
must async mpi $L train --root "$SCRATCH/async" "${T[@]}" --steps $N --save-at $K "${A[@]}" --json
must d_k "$CKPT" diff "$SCRATCH/sync" "$SCRATCH/async" --iter-b $K --json
must fp_sync "$CKPT" fingerprint "$SCRATCH/sync" --json
must fp_async "$CKPT" fingerprint "$SCRATCH/async" --iter $K --json
must d_final "$CKPT" diff "$SCRATCH/straight" "$SCRATCH/async" --json
# Resume from the async iteration-K checkpoint alone (a root holding just it).
seed_root() { mkdir -p "$2" && cp -r "$1/iter_$(printf %07d "$K")" "$2/" && echo "$K" >"$2/latest_checkpointed_iteration.txt"; }
seed_root "$SCRATCH/async" "$SCRATCH/res"
must resumed mpi $L train --root "$SCRATCH/res" "${T[@]}" --steps $N --resume --json
must d_res "$CKPT" diff "$SCRATCH/straight" "$SCRATCH/res" --json

# Blocking time: async saves every E iterations, no delay.
must timing mpi $L train --root "$SCRATCH/timing" --model "$TM" --seed 11 --steps $TN --save-every $E --async-save --json

# Overlap: saves at K, K+1, K+2 (and N2 = K+3), each delayed longer than a step.
N2=$((K + 3))
must overlap mpi $L train --root "$SCRATCH/overlap" "${T[@]}" --steps $N2 --save-at $K,$((K + 1)),$((K + 2)) \
  --async-save --async-delay-ms 300 --json
must ov_verify "$CKPT" verify "$SCRATCH/overlap" --all --json

# Crash of rank 1 in the background part of the second save (at K).
run_to crash mpi $L train --root "$SCRATCH/crash" "${T[@]}" --steps $N --save-at $K1,$K --async-save \
  --faults "point=step.shard_write rank=1 nth=2 action=crash" --faults-log "$SCRATCH/crash_faults.jsonl"
cp "$SCRATCH/crash/latest_checkpointed_iteration.txt" "$SCRATCH/crash_tracker.out"
ls -a "$SCRATCH/crash" >"$SCRATCH/crash_ls.out"
must cr_verify "$CKPT" verify "$SCRATCH/crash" --json
must cr_resumed mpi $L train --root "$SCRATCH/crash" "${T[@]}" --steps $N --resume --json
must d_cr "$CKPT" diff "$SCRATCH/straight" "$SCRATCH/crash" --json

# Negative control: no snapshot.
must nosnap mpi $L train --root "$SCRATCH/nosnap" "${T[@]}" --steps $N --save-at $K "${A[@]}" --async-no-snapshot --json
run_to nc_diff "$CKPT" diff "$SCRATCH/sync" "$SCRATCH/nosnap" --iter-b $K --json
run_to nc_verify "$CKPT" verify "$SCRATCH/nosnap" --iter $K --json
seed_root "$SCRATCH/nosnap" "$SCRATCH/nc_res"
run_to nc_resumed mpi $L train --root "$SCRATCH/nc_res" "${T[@]}" --steps $N --resume --json

py <<'EOF'
E_ = {k: int(os.environ[k]) for k in ("N", "K", "E", "K1", "D")}
N, K = E_["N"], E_["K"]
a, dk, dfin, dres = J("async"), J("d_k"), J("d_final"), J("d_res")
s_k = next(s for s in a["saves"] if s["iteration"] == K)
tm = J("timing")
ts = tm["saves"]
mb = tm["memcpy_baseline"]
first, steady = ts[0], ts[1:]
# Steady state: the median save after the first (the memcpy baseline is the median of 5 copies).
steady_block = sorted(s["blocking_seconds"] for s in steady)[len(steady) // 2]
ov = J("overlap")
ovs = ov["saves"]
mtimes = []
for s in ovs:
    p = os.path.join(S, "overlap", "iter_%07d" % s["iteration"], "manifest.json")
    mtimes.append(os.stat(p).st_mtime_ns if os.path.exists(p) else -1)
ov_tracker = int(open(os.path.join(S, "overlap", "latest_checkpointed_iteration.txt")).read().strip())
fired = [json.loads(l) for l in open(os.path.join(S, "crash_faults.jsonl"))] if os.path.exists(os.path.join(S, "crash_faults.jsonl")) else []
cr_tracker = int(open(os.path.join(S, "crash_tracker.out")).read().strip())
cr_ls = open(os.path.join(S, "crash_ls.out")).read().split()
cr_res, dcr = J("cr_resumed"), J("d_cr")
n = {
    "iterations": N, "async_at": K, "delay_ms": E_["D"],
    "steps_before_read": s_k["steps_before_read"],
    "tensors_compared": dk["tensors_compared"], "objects_compared": dk["objects_compared"],
    "k_tensors_differing": len(dk["tensors"]), "k_max_ulp": dk["max_ulp"],
    "fingerprint_equal": J("fp_sync")["digest"] == J("fp_async")["digest"],
    "final_tensors_differing": len(dfin["tensors"]),
    "resumed_from": J("resumed")["resumed"]["iteration"], "resume_tensors_differing": len(dres["tensors"]),
    "saves_timed": len(ts), "save_every": E_["E"], "snapshot_mb": first["snapshot_bytes"] / 1e6,
    "first_blocking_ms": 1e3 * first["blocking_seconds"], "memcpy_cold_ms": 1e3 * mb["cold_seconds"],
    "steady_blocking_ms": 1e3 * steady_block, "memcpy_warm_ms": 1e3 * mb["warm_seconds"],
    "steady_ratio": steady_block / mb["warm_seconds"], "first_ratio": first["blocking_seconds"] / mb["cold_seconds"],
    "steady_wait_ms": 1e3 * max(s["wait_previous_seconds"] for s in steady),
    "blocking_max_over_ranks_ms": 1e3 * max(s["blocking_seconds_max_over_ranks"] for s in ts),
    "background_s": max(s["background_seconds"] for s in ts), "save_s": max(s["save_seconds"] for s in ts),
    "step_ms": 1e3 * tm["step_seconds_mean"],
    "overlap_saves": len(ovs), "overlap_min_wait_ms": 1e3 * min(s["wait_previous_seconds"] for s in ovs[1:]),
    "overlap_tracker": ov_tracker,
    "crash_rc": RC("crash"), "crash_fired": ",".join(f"{f['point']}#{f['nth']}@r{f['rank']}" for f in fired),
    "crash_tracker": cr_tracker, "crash_tmp_dirs": sum(1 for x in cr_ls if x.startswith(".iter_")),
    "crash_resumed_from": cr_res["resumed"]["iteration"], "crash_resume_tensors_differing": len(dcr["tensors"]),
}
ncd, ncv = J("nc_diff"), J("nc_verify")
nc_res_txt = TXT("nc_resumed")
m = re.search(r"(checkpoint iteration \d+ holds [^\n]*)", nc_res_txt)
ns = next(s for s in J("nosnap")["saves"] if s["iteration"] == K)
nc = {"tensors_differing": len(ncd.get("tensors", [])), "tensors_compared": ncd.get("tensors_compared", 0),
      "max_ulp": ncd.get("max_ulp", 0), "objects_differing": len(ncd.get("objects", [])),
      "steps_before_read": ns["steps_before_read"], "blocking_ms": 1e3 * ns["blocking_seconds"],
      "verify_ok": ncv.get("ok", False), "resume_rc": RC("nc_resumed"),
      "resume_refusal": m.group(1) if m else ""}
checks = [
    ("training overwrote the buffers before the background save read them", n["steps_before_read"] == N - K),
    ("async checkpoint at K == sync checkpoint at K, bit for bit", dk["same"] and not dk["tensors"] and not dk["objects"]),
    ("fingerprints of the two iteration-K checkpoints equal", n["fingerprint_equal"]),
    ("the async job's own final checkpoint == a straight run", dfin["same"]),
    ("resume from the async K checkpoint == straight run, bit for bit", dres["same"] and n["resumed_from"] == K),
    ("blocking (steady) is below the background save time", steady_block < min(s["background_seconds"] for s in ts)),
    ("overlap: every next Start waited for the previous save", all(s["wait_previous_seconds"] > 0 for s in ovs[1:])),
    ("overlap: commits in order, tracker at the last, all verify",
     all(t > 0 for t in mtimes) and mtimes == sorted(mtimes) and len(set(mtimes)) == len(mtimes)
     and ov_tracker == ovs[-1]["iteration"] and J("ov_verify").get("ok", False)),
    ("crash in the background save: job fails, fault fired in save 2",
     RC("crash") != 0 and any(f["point"] == "step.shard_write" and f["nth"] == 2 for f in fired)),
    ("crash: the previous checkpoint stays latest and verifies",
     cr_tracker == E_["K1"] and f"iter_{K:07d}" not in cr_ls and J("cr_verify").get("ok", False)),
    ("crash: resume from it == straight run", dcr["same"] and n["crash_resumed_from"] == E_["K1"]),
]
emit("异步保存：一致性与阻塞时间",
     f"ckpt train tiny {a['layout']}, {N} iterations, async save at {K} (AsyncSaver, own communicator, MPI_THREAD_MULTIPLE; "
     f"background held {E_['D']} ms by the test hook); timing: model {os.environ['TM']}, async saves every {E_['E']} iterations; host memory only (no GPU)",
     n, checks,
     "异步保存 = 同步快照 + 后台提交：训练只阻塞在快照拷贝（加上等待上一次保存），一致性来自快照而与后台写多慢无关；"
     "最多一个保存在途，下一次 Start 等上一次提交后才开始；后台崩溃时上一个 checkpoint 仍是 latest",
     "--async-no-snapshot：后台直接读训练缓冲区（不拷贝）",
     nc, nc["tensors_differing"] > 0 and (nc["resume_rc"] != 0 or not nc["verify_ok"]),
     headline="第 {async_at} 步异步保存、训练继续到 {iterations}（后台读之前已过 {steps_before_read} 步）：与同步保存相比 "
              "{tensors_compared} 个张量 + {objects_compared} 个对象中 {k_tensors_differing} 个不同，指纹相同={fingerprint_equal}，"
              "从它续训与直跑 {resume_tensors_differing} 个张量不同；阻塞：首次 {first_blocking_ms:.2f} ms（冷 memcpy {memcpy_cold_ms:.2f} ms），"
              "稳态中位 {steady_blocking_ms:.3f} ms（热 memcpy 中位 {memcpy_warm_ms:.3f} ms，{steady_ratio:.1f} 倍），快照 {snapshot_mb:.2f} MB/rank，"
              "后台总时间 ≤ {background_s:.3f} s；重叠保存最少等待 {overlap_min_wait_ms:.0f} ms、按序提交；"
              "后台崩溃（{crash_fired}）后 tracker 停在 {crash_tracker}",
     nc_headline="无快照：iteration {async_at} 的检查点 {nc.tensors_differing}/{nc.tensors_compared} 个张量不同（max ulp {nc.max_ulp}），"
                 "verify 仍通过={nc.verify_ok}，续训 rc={nc.resume_rc}：{nc.resume_refusal}",
     gaps=[f"steady blocking {n['steady_ratio']:.2f}x the warm memcpy of the same bytes (target <= 1.2x)"
           if not REDUCED and n["steady_ratio"] > 1.2 else ""])
EOF
