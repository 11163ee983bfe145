#!/usr/bin/env python3
# title: 多 rank 原子提交：任意时刻崩溃只见旧或新
# question: seeds/level8/M115.md
"""`ckpt faults run` saves iteration 10, traces every IO operation of the save
of iteration 20 on every rank, then replays it once per boundary x rank with
the rank crashing there (_exit), recovers with a load under another layout
and checks: old (10) or new (20) bit for bit, never torn, never an
acknowledged commit lost.
Negative control, through the same code: the same campaign with
--in-place-commit (faults/inplace_storage.h), where the real save protocol
commits as Megatron-LM's torch_dist save does: rank files written straight
into iter_0000020/, manifest.json written last in place (MCore's
metadata.json), the tracker rewritten by a plain truncating open + write.
Every leftover counted below is what a real save that really crashed left in
the root: an incomplete iter_0000020/ that every lister sees (read element by
element by a marker-less reader against the complete iteration 20; ckpt's
load refuses it because its manifest is missing, as MCore refuses a directory
without metadata.json / .metadata), and an empty tracker (a crash between the
truncation and the write), on which ckpt's load fails loudly and --fallback
recovers the newest committed iteration.

Which crashes (budget: under 45 s on a busy 2-core machine; each crash is one
mpirun job, ~0.3-0.8 s): a crash just before an operation that neither changes the
disk nor talks to another rank (stat, size, listdir, pread, close) leaves the
same files and the same protocol state as a crash just before that rank's next
operation, so those boundaries are skipped; every other operation and protocol
step of every rank is crashed at. One crash kind: _exit. SIGKILL at the same
boundary stops the process at the same instruction with the same bytes handed
to the kernel (every write is a pwrite through Env, nothing is buffered in user
space), so it adds no disk state; the committed full-size run of 2026-12-03
(crash + sigkill, 138 runs) had the same outcome counts for both kinds. The
in-place control crashes rank 0 (the one that also writes the manifest and
the tracker) at the protocol steps and the first / middle / last write of each
of its files: the states a crash can leave in place, not every op."""
import glob

import h5py
import numpy as np

from scenlib import *  # noqa: F403

LAYOUT, VARIANTS = "tp=2", "crash"  # cost: one mpirun per boundary
POINTS = ("env.open,env.pwrite,env.truncate,env.fsync,env.rename,env.syncdir,env.mkdir,env.remove,env.rmdir,"
          "step.begin,step.plan,step.shard_write,step.shard_fsync,step.vote,step.manifest_write,step.manifest_rename,"
          "step.dir_rename,step.root_fsync,step.tracker_update,step.commit")
# In place, a crash leaves: iter_20 empty or partly written (shard_write, the writes), written but unsynced
# (shard_fsync), complete without a manifest (vote, manifest_write), an empty manifest or tracker (their one
# write: the truncating open came first), complete with the tracker still at 10 (tracker_update).
IP_POINTS = "env.pwrite,step.shard_write,step.shard_fsync,step.vote,step.manifest_write,step.tracker_update"
ITER = "iter_0000020"
TRACKER = "latest_checkpointed_iteration.txt"


def campaign(name, work, points, *extra):
    must(name + "_run", ck("faults", "run", "--work", work, "--layout", LAYOUT, "--model", "tiny", "--variants", VARIANTS,
                  "--points", points, "--mpirun", MPIRUN_STR, "--quiet", "--keep", "--json", path(name + ".out"),
                  *extra))
    return J(name)


def run_roots(work):
    return sorted(glob.glob(os.path.join(work, "runs", "*", "*", "root")), key=lambda p: int(p.split(os.sep)[-2]))


def sizes(d):
    return {os.path.basename(p): os.path.getsize(p) for p in glob.glob(os.path.join(d, "*"))}


def incomplete(d, final):
    got = sizes(d)
    return not all(got.get(nm, -1) == s for nm, s in final.items())


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


def torn_elements(d, truth):
    got = read_all(d)
    bad = 0
    for k, a in truth.items():
        b = got.get(k)
        bad += a.size if b is None or b.shape != a.shape else int(np.count_nonzero(a != b))
    return bad


W, WI = path("campaign"), path("inplace")
rep = campaign("report", W, POINTS)  # stdout (the table) in report_run.out, the JSON in report.out
irep = campaign("inplace_report", WI, IP_POINTS, "--in-place-commit", "--ranks", "0")
complete = os.path.join(W, "trace1", "root", ITER)  # the fault-free save's iteration 20
final = sizes(complete)
truth = read_all(complete)
total_elements = sum(a.size for a in truth.values())

# Atomic commit: what the crashed saves left is an invisible .iter_20.tmp-*; never an incomplete iter_0000020.
atomic_roots = run_roots(W)
atomic_tmp_partial = sum(1 for r in atomic_roots for t in glob.glob(os.path.join(r, ".iter_0000020.tmp-*"))
                         if incomplete(t, final))
atomic_visible_partial = sum(1 for r in atomic_roots if os.path.isdir(os.path.join(r, ITER))
                             and incomplete(os.path.join(r, ITER), final))

# In place: the same save, crashed at the same kind of boundaries, leaves these in the root itself.
ip_roots = run_roots(WI)
partials = [r for r in ip_roots if os.path.isdir(os.path.join(r, ITER)) and incomplete(os.path.join(r, ITER), final)]
torn = sorted(((torn_elements(os.path.join(r, ITER), truth), r) for r in partials), reverse=True)
torn_dirs = [t for t in torn if t[0] > 0]
worst = torn_dirs[0][1] if torn_dirs else ""
empty_trackers = [r for r in ip_roots if os.path.isfile(os.path.join(r, TRACKER))
                  and os.path.getsize(os.path.join(r, TRACKER)) == 0]
inplace_rc, inplace_refused = -1, False
if worst:
    # The worst one as the crash left it: the tracker still says 10; ask for 20, as a reader trusting the dir would.
    run_to("inplace_load", mpi(LAYOUT, "load", "--root", worst, "--iter", 20, "--no-check", "--json"))
    inplace_rc = RC("inplace_load")
    inplace_refused = inplace_rc != 0 and "manifest" in TXT("inplace_load")
# The empty tracker a real crash left (inside the in-place tracker write; iteration 20 complete before it).
et_root = empty_trackers[0] if empty_trackers else path("no_empty_tracker")
run_to("et_load", mpi("tp=1", "load", "--root", et_root, "--json"))
# --no-check: the campaign's oracle values are not `ckpt load`'s expected pattern; which iteration loads is the point.
run_to("et_fallback", mpi("tp=1", "load", "--root", et_root, "--fallback", "--no-check", "--json"))

v = {x["variant"]: x for x in rep["variants"]}
KINDS = ("runs", "old", "new", "error", "torn", "lost", "hang", "missed")
totals = {k: sum(x[k] for x in rep["variants"]) for k in KINDS}
itotals = {k: sum(x[k] for x in irep["variants"]) for k in KINDS}
etf = J("et_fallback") if RC("et_fallback") == 0 else {}
worst_torn = torn_dirs[0][0] if torn_dirs else 0
n = {
    "world": rep["world"], "boundaries": rep["boundaries"], "traced_ops_rank0": rep["traced_ops"][0],
    "runs": totals["runs"], "old": totals["old"], "new": totals["new"], "error": totals["error"],
    "torn": totals["torn"], "lost": totals["lost"], "hang": totals["hang"], "violations": rep["violations"],
    "old_fraction": round(totals["old"] / max(1, totals["runs"]), 2),
    "campaign_s": round(rep["seconds"], 1),
    "tmp_leftover_dirs": atomic_tmp_partial, "visible_partial_dirs": atomic_visible_partial,
    "empty_tracker_rc": RC("et_load"),
    "empty_tracker_fallback_rc": RC("et_fallback"), "empty_tracker_fallback_iter": etf.get("iteration", -1),
}
nc = {"in_place_commit": bool(irep.get("in_place_commit")), "boundaries": irep["boundaries"],
      "crash_runs": itotals["runs"], "old": itotals["old"], "new": itotals["new"], "error": itotals["error"],
      "torn": itotals["torn"], "lost": itotals["lost"],
      "partial_iter20_dirs": len(partials), "torn_data_dirs": len(torn_dirs),
      "inplace_torn_elements": worst_torn, "inplace_elements": total_elements,
      "inplace_torn_fraction": round(worst_torn / total_elements, 3) if total_elements else 0.0,
      "empty_tracker_runs": len(empty_trackers),
      "marker_load_rc": inplace_rc, "marker_refused": inplace_refused, "campaign_s": round(irep["seconds"], 1)}
checks = [
    ("every crash run recovers old or new bit for bit (torn = lost = hang = 0)",
     totals["torn"] == 0 and totals["lost"] == 0 and totals["hang"] == 0 and totals["missed"] == 0
     and rep["violations"] == 0),
    ("both outcomes occur (the crash points span the commit)", totals["old"] > 0 and totals["new"] > 0),
    ("the traced IO sequence is stable (replay is meaningful)", rep["trace_stable"] and irep["trace_stable"]),
    ("no crash leaves an incomplete iter_0000020 visible (leftovers stay in .iter_20.tmp-*)",
     atomic_visible_partial == 0),
    ("empty tracker (left by a real crash of the in-place tracker write): plain load fails loudly "
     "(non-zero exit, names the tracker)", bool(empty_trackers) and RC("et_load") != 0 and "tracker" in TXT("et_load")),
    ("empty tracker + --fallback: the newest committed iteration (20) loads, hashes checked",
     RC("et_fallback") == 0 and etf.get("iteration") == 20),
]
emit("多 rank 原子提交：任意时刻崩溃只见旧或新",
     f"faults run: {rep['layout']} ({rep['world']} ranks), tiny, save 10 → 20, {'+'.join(v)} at every IO boundary of "
     f"every rank, recovery at {rep['recover_layout']}; control: the same save committed in place "
     f"(--in-place-commit), crashed at {irep['boundaries']} boundaries",
     n, checks,
     "每个 rank 先写 .iter_N.tmp-* 并 fsync，投票后由 rank 0 写自哈希 manifest、rename 成 iter_N、再原子更新 tracker；"
     "在任何一个 IO 边界崩溃，恢复到的都是旧或新且逐位一致，残留只在加载器看不见的 .iter_N.tmp-* 里；"
     "空 tracker 时直接加载报错（非零退出码），--fallback 找回最新的已提交 iteration",
     "同一个保存协议改为原地提交（--in-place-commit，即 MCore torch_dist 的做法：分片直接写进 iter_N/、manifest 最后原地写、"
     "tracker 用截断再写）并在同类边界真实崩溃：崩溃本身在根目录里留下可见的残缺 iter_0000020/ 与空 tracker；"
     "不看完成标记的读者读到撕裂数据，按完成标记（ckpt 的 manifest，相当于 MCore 的 metadata.json / .metadata）判断的加载拒绝它",
     nc, len(partials) > 0 and worst_torn > 0 and inplace_refused and len(empty_trackers) > 0,
     headline="{world} rank、{boundaries} 个边界、{runs} 次崩溃：旧 {old} / 新 {new}（旧占 {old_fraction}）/ 撕裂 {torn} / "
              "丢失已确认 {lost} / 挂起 {hang}；可见的残缺 iter_20 {visible_partial_dirs} 个（残留在 tmp 目录 "
              "{tmp_leftover_dirs} 个）；空 tracker 直接 load rc={empty_tracker_rc}，--fallback rc="
              "{empty_tracker_fallback_rc} → iter {empty_tracker_fallback_iter}",
     headline_en="{world} ranks, {boundaries} IO boundaries, {runs} crashes: old {old} / new {new} (old share "
                 "{old_fraction}) / torn {torn} / acknowledged lost {lost} / hung {hang}; visible incomplete "
                 "iter_20: {visible_partial_dirs} (leftovers in tmp dirs: {tmp_leftover_dirs}); empty tracker: plain load "
                 "rc={empty_tracker_rc}, --fallback rc={empty_tracker_fallback_rc} -> iteration {empty_tracker_fallback_iter}",
     nc_headline="原地提交、{nc.crash_runs} 次真实崩溃：{nc.partial_iter20_dirs} 次在根目录留下可见的残缺 iteration 20，"
                 "其中 {nc.torn_data_dirs} 个的数据本身残缺（最坏的一个，不看标记的读者 {nc.inplace_elements} 个元素中 "
                 "{nc.inplace_torn_elements} 个缺失或错误，{nc.inplace_torn_fraction}）；{nc.empty_tracker_runs} 次留下空 tracker；"
                 "看标记的加载 rc={nc.marker_load_rc}，拒绝={nc.marker_refused}；恢复：旧 {nc.old} / 新 {nc.new} / "
                 "报错 {nc.error} / 撕裂 {nc.torn}",
     nc_headline_en="committed in place, {nc.crash_runs} real crashes: {nc.partial_iter20_dirs} left a visible incomplete "
                    "iteration 20 in the root, {nc.torn_data_dirs} of them with incomplete data (the worst: a marker-less "
                    "reader gets {nc.inplace_torn_elements} of {nc.inplace_elements} elements missing or wrong, "
                    "{nc.inplace_torn_fraction}); {nc.empty_tracker_runs} left an empty tracker; the marker-checking load "
                    "rc={nc.marker_load_rc}, refused={nc.marker_refused}; recovery: old {nc.old} / new {nc.new} / "
                    "error {nc.error} / torn {nc.torn}")
