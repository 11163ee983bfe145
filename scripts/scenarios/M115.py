#!/usr/bin/env python3
# title: 多 rank 原子提交：任意时刻崩溃只见旧或新
# question: seeds/level8/M115.md
"""`ckpt faults run` saves iteration 10, traces every IO operation of the save
of iteration 20 on every rank, then replays it once per boundary x rank with
the rank crashing there (_exit, and SIGKILL), recovers with a load under
another layout and checks: old (10) or new (20) bit for bit, never torn, never
an acknowledged commit lost. Then the tracker is emptied (what a crash inside a
plain open/truncate/write of latest_checkpointed_iteration.txt leaves) and
loaded with and without --fallback.
Negative control: what the crashed saves left on disk, placed where an
in-place writer (MCore writes iter_N/ in place) would have it. A loader that
trusts the directory reads torn data (counted element by element against the
complete iteration 20); ckpt, like MCore's completion marker (metadata.json /
.metadata written last), refuses the directory because its manifest is missing.

Which crashes (budget: under 60 s on a busy 2-core machine; each crash is one
mpirun job, ~0.8 s): a crash just before an operation that neither changes the
disk nor talks to another rank (stat, size, listdir, pread, close) leaves the
same files and the same protocol state as a crash just before that rank's next
operation, so those boundaries are skipped; every other operation and protocol
step of every rank is crashed at. One crash kind: _exit. SIGKILL at the same
boundary stops the process at the same instruction with the same bytes handed
to the kernel (every write is a pwrite through Env, nothing is buffered in user
space), so it adds no disk state; the committed full-size run of 2026-12-03
(crash + sigkill, 138 runs) had the same outcome counts for both kinds."""
import glob
import shutil

import h5py
import numpy as np

from scenlib import *  # noqa: F403

LAYOUT, VARIANTS = "tp=2", "crash"  # cost: one mpirun per boundary
POINTS = ("env.open,env.pwrite,env.truncate,env.fsync,env.rename,env.syncdir,env.mkdir,env.remove,env.rmdir,"
          "step.begin,step.plan,step.shard_write,step.shard_fsync,step.vote,step.manifest_write,step.manifest_rename,"
          "step.dir_rename,step.root_fsync,step.tracker_update,step.commit")
W = path("campaign")
must("campaign", ck("faults", "run", "--work", W, "--layout", LAYOUT, "--model", "tiny", "--variants", VARIANTS,
                    "--points", POINTS, "--mpirun", MPIRUN_STR, "--quiet", "--keep", "--json", path("report.out")))
new_dirs = sorted(glob.glob(os.path.join(W, "runs", "*", "*", "root", "iter_0000020")))
newroot = os.path.dirname(new_dirs[0])
shutil.copytree(newroot, path("empty_tracker"))
open(path("empty_tracker", "latest_checkpointed_iteration.txt"), "w").close()
run_to("et_load", mpi("tp=1", "load", "--root", path("empty_tracker"), "--json"))
# --no-check: the campaign's oracle values are not `ckpt load`'s expected pattern; which iteration loads is the point.
run_to("et_fallback", mpi("tp=1", "load", "--root", path("empty_tracker"), "--fallback", "--no-check", "--json"))

rep = J("report")
final = {os.path.basename(p): os.path.getsize(p) for p in glob.glob(os.path.join(new_dirs[0], "*"))}
partials = []  # (tmp dir, file sizes) of crashed saves that left an incomplete iteration 20
for run in glob.glob(os.path.join(W, "runs", "*", "*")):
    for tmp in glob.glob(os.path.join(run, "root", ".iter_0000020.tmp-*")):
        names = {os.path.basename(p): os.path.getsize(p) for p in glob.glob(os.path.join(tmp, "*"))}
        if not all(names.get(nm, -1) == s for nm, s in final.items()):
            partials.append((tmp, names))


def read_all(d):
    """What a marker-less loader gets from a directory: every dataset it can read, per shard file."""
    out = {}
    for p in sorted(glob.glob(os.path.join(d, "rank_*.h5"))):
        try:
            with h5py.File(p, "r") as f:
                for name, ds in f["tensors"].items():
                    try:
                        out[(os.path.basename(p), name)] = ds[()]
                    except (OSError, KeyError, ValueError):
                        pass
        except (OSError, KeyError, ValueError):
            pass
    return out


# What a marker-less reader gets from each partial directory, element by element against the complete iteration 20.
truth = read_all(new_dirs[0])
total_elements = sum(a.size for a in truth.values())
torn = []  # (torn elements, tmp dir) per partial directory
for tmp, _ in partials:
    got = read_all(tmp)
    bad = 0
    for k, a in truth.items():
        b = got.get(k)
        bad += a.size if b is None or b.shape != a.shape else int(np.count_nonzero(a != b))
    torn.append((bad, tmp))
torn_dirs = [t for t in torn if t[0] > 0]
torn_elements = max((t[0] for t in torn), default=0)
inplace_rc, inplace_refused = -1, False
if torn_dirs:
    # The worst one becomes root/iter_0000020, as an in-place writer would have left it; the tracker points at it.
    tmp = max(torn_dirs)[1]
    root = path("inplace")
    shutil.copytree(os.path.dirname(tmp), root, ignore=shutil.ignore_patterns(".iter_*"))
    shutil.rmtree(os.path.join(root, "iter_0000020"), ignore_errors=True)
    shutil.copytree(tmp, os.path.join(root, "iter_0000020"))
    with open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w") as f:
        f.write("20\n")
    run_to("inplace_load", mpi(LAYOUT, "load", "--root", root, "--iter", 20, "--no-check", "--json"))
    inplace_rc = RC("inplace_load")
    inplace_refused = inplace_rc != 0 and "manifest" in TXT("inplace_load")

v = {x["variant"]: x for x in rep["variants"]}
totals = {k: sum(x[k] for x in rep["variants"]) for k in ("runs", "old", "new", "error", "torn", "lost", "hang", "missed")}
etf = J("et_fallback") if RC("et_fallback") == 0 else {}
n = {
    "world": rep["world"], "boundaries": rep["boundaries"], "traced_ops_rank0": rep["traced_ops"][0],
    "runs": totals["runs"], "old": totals["old"], "new": totals["new"], "error": totals["error"],
    "torn": totals["torn"], "lost": totals["lost"], "hang": totals["hang"], "violations": rep["violations"],
    "old_fraction": round(totals["old"] / max(1, totals["runs"]), 2),
    "campaign_s": round(rep["seconds"], 1),
    "empty_tracker_rc": RC("et_load"),
    "empty_tracker_fallback_rc": RC("et_fallback"), "empty_tracker_fallback_iter": etf.get("iteration", -1),
}
nc = {"crash_runs": totals["runs"], "partial_iter20_dirs": len(partials), "torn_data_dirs": len(torn_dirs),
      "inplace_torn_elements": torn_elements, "inplace_elements": total_elements,
      "inplace_torn_fraction": round(torn_elements / total_elements, 3) if total_elements else 0.0,
      "marker_load_rc": inplace_rc, "marker_refused": inplace_refused}
checks = [
    ("every crash run recovers old or new bit for bit (torn = lost = hang = 0)",
     totals["torn"] == 0 and totals["lost"] == 0 and totals["hang"] == 0 and totals["missed"] == 0
     and rep["violations"] == 0),
    ("both outcomes occur (the crash points span the commit)", totals["old"] > 0 and totals["new"] > 0),
    ("the traced IO sequence is stable (replay is meaningful)", rep["trace_stable"]),
    ("empty tracker: plain load fails loudly (non-zero exit, names the tracker)",
     RC("et_load") != 0 and "tracker" in TXT("et_load")),
    ("empty tracker + --fallback: the newest committed iteration (20) loads, hashes checked",
     RC("et_fallback") == 0 and etf.get("iteration") == 20),
]
emit("多 rank 原子提交：任意时刻崩溃只见旧或新",
     f"faults run: {rep['layout']} ({rep['world']} ranks), tiny, save 10 → 20, {'+'.join(v)} at every IO boundary of "
     f"every rank, recovery at {rep['recover_layout']}",
     n, checks,
     "每个 rank 先写 .iter_N.tmp-* 并 fsync，投票后由 rank 0 写自哈希 manifest、rename 成 iter_N、再原子更新 tracker；"
     "在任何一个 IO 边界崩溃，恢复到的都是旧或新且逐位一致；空 tracker 时直接加载报错（非零退出码），--fallback 找回最新的已提交 iteration",
     "崩溃留下的 iteration 20 放到原地写者（MCore 原地写 iter_N/）会放的位置：不看完成标记的读者读到撕裂数据；"
     "按完成标记（ckpt 的 manifest，相当于 MCore 的 metadata.json / .metadata）判断的加载拒绝它",
     nc, len(torn_dirs) > 0 and torn_elements > 0 and inplace_refused,
     headline="{world} rank、{boundaries} 个边界、{runs} 次崩溃：旧 {old} / 新 {new}（旧占 {old_fraction}）/ 撕裂 {torn} / "
              "丢失已确认 {lost} / 挂起 {hang}；空 tracker 直接 load rc={empty_tracker_rc}，--fallback rc="
              "{empty_tracker_fallback_rc} → iter {empty_tracker_fallback_iter}",
     headline_en="{world} ranks, {boundaries} IO boundaries, {runs} crashes: old {old} / new {new} (old share "
                 "{old_fraction}) / torn {torn} / acknowledged lost {lost} / hung {hang}; empty tracker: plain load "
                 "rc={empty_tracker_rc}, --fallback rc={empty_tracker_fallback_rc} -> iteration {empty_tracker_fallback_iter}",
     nc_headline="{nc.crash_runs} 次崩溃中 {nc.partial_iter20_dirs} 次留下不完整的 iteration 20，其中 {nc.torn_data_dirs} 个的数据本身残缺；"
                 "最坏的一个原地放置后，不看标记的读者 {nc.inplace_elements} 个元素中 {nc.inplace_torn_elements} 个缺失或错误（{nc.inplace_torn_fraction}）；"
                 "看标记的加载 rc={nc.marker_load_rc}，拒绝={nc.marker_refused}",
     nc_headline_en="{nc.partial_iter20_dirs} of {nc.crash_runs} crashes left an incomplete iteration 20, "
                    "{nc.torn_data_dirs} of them with incomplete data; the worst placed in place, a marker-less reader gets {nc.inplace_torn_elements} of {nc.inplace_elements} elements "
                    "missing or wrong ({nc.inplace_torn_fraction}); the marker-checking load rc={nc.marker_load_rc}, "
                    "refused={nc.marker_refused}")
