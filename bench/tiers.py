#!/usr/bin/env python3
"""Local tier figures (issue 33 item 5), one run on one state: `bench/tiers.py [--ckpt CKPT_LAB]`.

A 2-node x 2-rank job (nodes simulated by rank groups, --ranks-per-node 2) trains to iteration N
with local saves every K (node dirs in tmpfs, /dev/shm: the node's RAM tier) and global saves
every M (drained from the local copy, the global root on the VM's disk); it is SIGKILLed after
iteration N's saves, so N is in both tiers. Node 1's local dir is then removed (a fresh node) and
the job restarted twice on the same state: (a) tiered: local tier + the peers' replicas, node 1's
ranks fetching their copies over the job's MPI communicator; (b) the local tier removed entirely,
so the same code restores from the global tier - read as a FRESH node would: every global file is
fsynced and dropped from the page cache (posix_fadvise DONTNEED) right before, so it comes from
the disk (the default read mode then picks O_DIRECT). Default state: ~93 MB per rank
(--model tiny:hidden=320,ffn_hidden=1280), where bandwidth, not fixed costs, decides.
Prints JSON: restart seconds (job's slowest rank, in-process: choice + fetch + load + checks, with
that rank's phases), their ratio, per-local-save blocking vs one memcpy of
the same bytes (from a short --async-save run), network and memory bytes per save, and steps
lost per failure (tiered vs global-only, same global interval).
On one VM both tiers share 2 CPUs and the "network" is MPI over shared memory, which on the
bench VM moves ~35 MB/s as one large message and ~300 MB/s in 256 KB-1 MB rounds (first-touch
page faults cost ~50x a memcpy there): the ratio is this VM's, not a cluster's.
--repeat R restarts each tier R times on the one state (the local tier put back as the kill left it
each time, the global files dropped from the page cache each time): every run is listed, the
figures are the medians. Each restart also gives its slowest rank's phases (choose, fetch, load:
read/hash/decode/copy summed over its read workers, keep, apply), every rank's wall and CPU seconds,
and before_restore (process start, MPI init, state set-up: the same for both tiers, outside the
restart time). --hash picks the chunk hash of every save (both tiers check the same one at load).
--s3 adds a second global figure: the same global files uploaded to s3rver (tests/s3/s3rver.py, the
object store the S3 backend is tested against: Node.js over HTTP on this VM) and the job restarted
from that s3:// root.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ap = argparse.ArgumentParser()
ap.add_argument("--ckpt", default=os.path.join(os.path.dirname(__file__), "../build/harness/lab/ckpt-lab"),
                help="ckpt-lab (the runs use its harness switches --kill-at and --faults)")
ap.add_argument("--model", default="tiny:hidden=320,ffn_hidden=1280")
ap.add_argument("--steps", type=int, default=4)
ap.add_argument("--campaign", action="store_true",
                help="also: a real crash (faults 'action=crash') of rank 2 at each step of the local save of "
                     "iteration 4, node 1's dir then removed; resumed to iteration 8, fingerprint vs uninterrupted")
ap.add_argument("--hash", default="sha256", help="chunk hash of the saves: sha256 (default) or xxh3-128")
ap.add_argument("--repeat", type=int, default=1, help="restarts of each tier on the one state (medians reported)")
ap.add_argument("--s3", action="store_true", help="also restart from the global files uploaded to s3rver")
args = ap.parse_args()
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
work = tempfile.mkdtemp(prefix="tiers_bench_", dir="/tmp")
shm = tempfile.mkdtemp(prefix="tiers_bench_", dir="/dev/shm")
backup = tempfile.mkdtemp(prefix="tiers_bench_kept_", dir="/dev/shm")  # the local tier as the kill left it
K, M, N = 2, 4, args.steps
job = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4", args.ckpt, "train", "--model", args.model,
       "--layout", "tp=2,dp=2", "--steps", str(N), "--save-every", str(M), "--root", f"{work}/global",
       "--local-dir", f"{shm}/node{{node}}", "--local-every", str(K), "--ranks-per-node", "2", "--json",
       "--hash", args.hash]


def last_json(out):
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def drop_from_page_cache(root):
    """What a fresh node sees: none of the root's files in its page cache."""
    for d, _, files in os.walk(root):
        for f in files:
            fd = os.open(os.path.join(d, f), os.O_RDONLY)
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def restart(cmd, env=ENV):
    """One restart; its "resumed" report, trimmed to the figures, with the command's own wall time."""
    t0 = time.monotonic()
    r = subprocess.run(cmd + ["--resume"], capture_output=True, text=True, env=env, timeout=600)
    wall = time.monotonic() - t0
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    j = last_json(r.stdout)["resumed"]
    ranks = j["per_rank"]
    return {"tier": j["tier"], "seconds": j["seconds"], "slowest_rank": j["slowest_rank"],
            "cpu_seconds_per_rank": [round(x["cpu_seconds"], 3) for x in ranks],
            "before_restore_seconds_max": max(x["phases_seconds"]["before_restore"] for x in ranks),
            "command_seconds": wall, "fetched_bytes": j.get("fetched_bytes_all_ranks", 0)}


def put_local_tier_back(backup):
    """The local tier as the kill left it, then node 1 lost (a fresh node)."""
    shutil.rmtree(shm)
    shutil.copytree(backup, shm)
    shutil.rmtree(f"{shm}/node1")


def median_of(runs, key="seconds"):
    return statistics.median(x[key] for x in runs)


def s3_restarts(root):
    """The global files, byte for byte, as objects of s3rver's bucket; restarts from that root."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../tests/s3"))
    import s3rver
    with s3rver.running(f"{work}/s3rver") as aws:
        for d, _, files in os.walk(root):
            for f in files:
                key = os.path.relpath(os.path.join(d, f), root)
                subprocess.run(["curl", "-sSf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                                f"{aws['AWS_ACCESS_KEY_ID']}:{aws['AWS_SECRET_ACCESS_KEY']}", "-H",
                                "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-T", os.path.join(d, f),
                                f"{aws['AWS_ENDPOINT_URL']}/{s3rver.BUCKET}/tiers/{key}"], check=True, timeout=120)
        env = dict(ENV, **aws)
        cmd = [a if a != f"{work}/global" else f"s3://{s3rver.BUCKET}/tiers" for a in job]
        for k in aws:  # mpirun passes these to the ranks
            cmd[1:1] = ["-x", k]
        runs = []
        for _ in range(args.repeat):
            shutil.rmtree(shm)
            os.makedirs(shm)
            runs.append(restart(cmd, env))
        return runs


def fingerprint(root):
    r = subprocess.run([args.ckpt, "fingerprint", root, "--json"], capture_output=True, text=True, timeout=300)
    return json.loads(r.stdout)["digest"]


def campaign():
    """Data lost per single-node kill at each step of a local save (rank 2 = node 1 crashes there,
    then node 1's local dir is removed): the restart must resume from the newest iteration marked
    on a surviving node and end bitwise equal to the uninterrupted run."""
    ref = f"{work}/ref"
    subprocess.run([a if a != f"{work}/global" else ref for a in job if a not in ("--json",)], env=ENV,
                   capture_output=True, timeout=600, check=True)
    want, rows = fingerprint(ref), []
    for step in ("shard_write", "dir_rename", "local_replicate", "local_receive", "local_vote", "local_marker",
                 "local_gc"):
        shutil.rmtree(shm, ignore_errors=True)
        os.makedirs(shm)
        root = f"{work}/c_{step}"
        run = [a if a != f"{work}/global" else root for a in job] + ["--timeout-ms", "5000"]
        subprocess.run(run + ["--faults", f"point=step.{step} rank=2 nth=2 action=crash"], env=ENV,
                       capture_output=True, timeout=600)
        shutil.rmtree(f"{shm}/node1", ignore_errors=True)
        marker = f"{shm}/node0/LOCAL_COMPLETE"
        marked = json.load(open(marker))["iteration"] if os.path.exists(marker) else -1
        r = subprocess.run(run + ["--resume"], env=ENV, capture_output=True, text=True, timeout=600)
        res = last_json(r.stdout)["resumed"] if r.returncode == 0 else {"error": r.stderr[-500:]}
        rows.append({"step": step, "surviving_marker": marked, "resumed": res.get("tier"),
                     "iteration": res.get("iteration"), "data_lost": res.get("iteration") != marked,
                     "bitwise": r.returncode == 0 and fingerprint(root) == want})
    return {"runs": rows, "data_lost_runs": sum(x["data_lost"] or not x["bitwise"] for x in rows)}


try:
    r = subprocess.run(job + ["--kill-at", str(N)], capture_output=True, text=True, env=ENV, timeout=1200)
    assert f"killing the job after iteration {N}" in r.stdout, r.stdout + r.stderr
    shutil.copytree(shm, backup, dirs_exist_ok=True)
    tiered_runs, global_runs = [], []
    for _ in range(args.repeat):  # alternately, on the one state
        put_local_tier_back(backup)
        tiered_runs.append(restart(job))
        shutil.rmtree(shm)
        os.makedirs(shm)
        drop_from_page_cache(f"{work}/global")
        global_runs.append(restart(job))
    shutil.rmtree(backup)
    s3_runs = s3_restarts(f"{work}/global") if args.s3 else []
    t = tiered_runs[0]
    assert all(x["tier"] == "local" for x in tiered_runs) and all(x["tier"] == "global" for x in global_runs + s3_runs)
    # blocking per local save vs one memcpy: a short --async-save run (local saves at K and 2K, the
    # global one at 2K drained from the local copy); with --async-save a local save blocks for a
    # snapshot into host memory (plus any wait for the previous background save)
    shutil.rmtree(shm)
    os.makedirs(shm)
    short = [a if a != f"{work}/global" else f"{work}/g2" for a in job]
    short[short.index("--steps") + 1] = short[short.index("--save-every") + 1] = str(2 * K)
    run = subprocess.run(short + ["--async-save"], capture_output=True, text=True, env=ENV, timeout=1200)
    assert run.returncode == 0, run.stdout + run.stderr
    s = last_json(run.stdout)
    local_rows = [x for x in s["saves"] if x.get("tier") == "local"]
    memcpy = s["memcpy_baseline"]["warm_seconds"]
    # the first local save also pays this VM's first-touch page faults of the state it copies;
    # the later ones are the steady state
    block = local_rows[-1]["blocking_seconds_max_over_ranks"]
    out = {
        "model": args.model, "state_bytes_per_rank": local_rows[0]["state_bytes"], "chunk_hash": args.hash,
        "restart_local_peers_seconds": median_of(tiered_runs),
        "restart_fetched_bytes": t["fetched_bytes"],
        "restart_global_seconds": median_of(global_runs),
        "restart_global_read": "cold: global files dropped from the page cache before each restart",
        "restart_ratio_global_over_local": median_of(global_runs) / median_of(tiered_runs),
        "restart_ratios_per_run": [x["seconds"] / y["seconds"] for x, y in zip(global_runs, tiered_runs)],
        "restart_runs": {"local_peers": tiered_runs, "global": global_runs},
        "local_save_blocking_seconds_first": local_rows[0]["blocking_seconds_max_over_ranks"],
        "local_save_blocking_seconds_steady": block,
        "local_save_rows": [{k: x.get(k) for k in ("iteration", "mode", "blocking_seconds_max_over_ranks",
                                                   "wait_previous_seconds", "snapshot_seconds", "background_seconds",
                                                   "write_seconds", "replicate_seconds", "commit_seconds")}
                            for x in local_rows],
        "local_save_write_seconds_median": sorted(x["write_seconds"] for x in local_rows)[len(local_rows) // 2],
        "local_save_replicate_seconds_median":
            sorted(x["replicate_seconds"] for x in local_rows)[len(local_rows) // 2],
        "memcpy_same_bytes_seconds": memcpy,
        "steady_blocking_over_memcpy": block / memcpy,
        "network_bytes_per_save_per_rank": local_rows[0]["network_bytes_sent"],
        "buffer_bytes_per_save_per_rank": local_rows[0]["buffer_bytes"],
        "global_drains": [x for x in s["saves"] if x.get("tier") == "global"],
        "steps_lost_per_failure_mean": {"tiered": K / 2, "global_only": M / 2,
                                        "note": "uniform failure time; local every K, global every M"},
    }
    if s3_runs:
        out["restart_global_s3rver_seconds"] = median_of(s3_runs)
        out["restart_ratio_global_s3rver_over_local"] = median_of(s3_runs) / median_of(tiered_runs)
        out["restart_runs"]["global_s3rver"] = s3_runs
    if args.campaign:
        out["campaign"] = campaign()
    print(json.dumps(out, indent=1))
finally:
    shutil.rmtree(work, ignore_errors=True)
    shutil.rmtree(backup, ignore_errors=True)
    shutil.rmtree(shm, ignore_errors=True)
