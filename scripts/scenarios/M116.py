#!/usr/bin/env python3
# title: fsync 与掉电：已确认的提交不能丢
# question: seeds/level8/M116.md
"""`ckpt faults run --variants powercut`: the save of iteration 20 runs on a
power-loss Env that journals every write, fsync, create and rename; at every IO
boundary of every rank (and after the job) the power is cut and the disk is
rebuilt three ways - drop (every unsynced write and unsynced name change lost),
prefix (a random prefix of the unsynced writes kept) and torn (sectors of
unsynced writes mixed old/new). Recovery must load old or new, and never lose a
commit that was acknowledged to the caller.
Negative control: the same campaign with fsync/fdatasync/dir-fsync turned into
no-ops that report success (a lying disk, or a writer that never calls fsync,
like MCore's tracker and metadata.json written with a plain open()).

Which boundaries (budget: under 60 s on a busy 2-core machine; each cut is one
mpirun job, ~1.2 s): a power cut leaves the disk as the journal of mutating
operations left it, so a cut just before an operation that changes nothing on
disk (stat, size, listdir, pread, close) or before a protocol marker that sits
between two env operations (step.begin/plan/shard_write/...) gives the same
disk as the cut before the next mutating operation. The campaign cuts before
every mutating operation of every rank (open, pwrite first/middle/last of each
file, truncate, fsync, rename, syncdir, mkdir, remove, rmdir), before each
rank's vote and commit (where acknowledgement changes) and after the job. The
control cuts only at each rank's step.commit and after the job: in the
committed full-size run over all 70 boundaries (2026-12-03) every lost
acknowledged commit of the control was at exactly these 3 points (3 per mode,
9 in all), and these 3 points alone give the same 9."""
from scenlib import *  # noqa: F403

LAYOUT = "tp=2"  # the campaign's cost is process start-ups per boundary
MODES = "drop,torn" if REDUCED else "drop,prefix,torn"  # CI size: two rebuild modes
MUTATING = "env.open,env.pwrite,env.truncate,env.fsync,env.rename,env.syncdir,env.mkdir,env.remove,env.rmdir"
POINTS = ["--points", MUTATING + ",step.vote,step.commit,end"]
NCPOINTS = ["--points", "step.commit,end"]
must("campaign", ck("faults", "run", "--work", path("sync"), "--layout", LAYOUT, "--model", "tiny", "--variants",
                    "powercut", "--power-modes", MODES, *POINTS, "--mpirun", MPIRUN_STR, "--quiet", "--json",
                    path("sync_report.out")))
# Expected to find violations (non-zero exit); judged from its report.
run_to("nosync", ck("faults", "run", "--work", path("nosync"), "--layout", LAYOUT, "--model", "tiny", "--variants",
                    "powercut", "--power-modes", MODES, *NCPOINTS, "--no-fsync", "--mpirun", MPIRUN_STR, "--quiet",
                    "--json", path("nosync_report.out")))

a, b = J("sync_report"), J("nosync_report")


def tot(rep, k):
    return sum(x[k] for x in rep["variants"])


ma = {x["variant"].split("/")[-1]: x for x in a["variants"]}
mb = {x["variant"].split("/")[-1]: x for x in b["variants"]}
n = {"world": a["world"], "boundaries": a["boundaries"], "cuts": a["variants"][0]["runs"], "runs": tot(a, "runs"),
     "old": tot(a, "old"), "new": tot(a, "new"), "error": tot(a, "error"), "torn": tot(a, "torn"),
     "lost": tot(a, "lost"), "violations": a["violations"], "modes": ",".join(sorted(ma)),
     "campaign_s": round(a["seconds"], 1)}
nc = {"runs": tot(b, "runs"), "lost_acknowledged": tot(b, "lost"), "torn": tot(b, "torn"), "error": tot(b, "error"),
      "violations": b["violations"]}
for m, x in mb.items():
    nc[f"{m}_lost"] = x["lost"]
checks = [
    ("with fsync: no torn state, no acknowledged commit lost, in every power-loss mode",
     tot(a, "torn") == 0 and tot(a, "lost") == 0 and a["violations"] == 0),
    ("every requested rebuild mode was exercised", set(MODES.split(",")) <= set(ma)),
    ("both outcomes occur", tot(a, "old") > 0 and tot(a, "new") > 0),
]
emit("fsync 与掉电：已确认的提交不能丢",
     f"faults run --variants powercut: {a['layout']} ({a['world']} ranks), tiny, save 10 → 20, power cut at every IO "
     "boundary that changes the disk (or a vote/commit) + after the job, disk rebuilt as drop/prefix/torn",
     n, checks,
     "文件 fsync、目录 fsync（rename/create 才持久）、manifest 与 tracker 都走 tmp→fsync→rename→fsync dir，并且只在这些都完成后才向调用者确认提交："
     "掉电在任何时刻发生，恢复的都是旧或新，已确认的提交一个不丢",
     "fsync/目录 fsync 全部变成假装成功的空操作（--no-fsync）",
     nc, b["violations"] > 0 and tot(b, "lost") + tot(b, "torn") > 0,
     headline="{world} rank、{boundaries} 个边界、{cuts} 次掉电，按 {modes} 重建磁盘，共 {runs} 次判定：旧 {old} / 新 {new} / 撕裂 {torn} / 丢失已确认 {lost}",
     headline_en="{world} ranks, {boundaries} boundaries, {cuts} power cuts, disk rebuilt as {modes}: {runs} verdicts, "
                 "old {old} / new {new} / torn {torn} / acknowledged lost {lost}",
     nc_headline="{nc.runs} 次判定中 {nc.lost_acknowledged} 次丢掉已确认的提交、{nc.torn} 次撕裂、{nc.error} 次无法加载（违规 {nc.violations}）",
     nc_headline_en="of {nc.runs} verdicts {nc.lost_acknowledged} lost an acknowledged commit, {nc.torn} torn, "
                    "{nc.error} unloadable (violations {nc.violations})")
