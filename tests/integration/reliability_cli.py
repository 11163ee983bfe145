#!/usr/bin/env python3
"""Reliability from the outside (issue 16): regression cases run against the
`ckpt` binary, one ctest per case.

  fallback      items 3: --fallback falls back for every damage class
  lagging       item 4: a lagging tracker does not hide damage
  concurrent    item 6: concurrent saves on one root
  older         item 7: restarting in a used root
  small         item 8: --iter -5, control characters, simulation presets
  hang          item 5: a hung/stopped rank ends the job (mpirun returns)

Usage: reliability_cli.py <ckpt> <scratch> <case> [--mpirun "mpirun ..."]
Every run has a deadline; a case prints what it checked and exits 1 on the
first failed expectation.
"""
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1")
FAILED = []


def run(cmd, timeout=120, env=ENV):
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
        hung = False
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        hung = True
    return p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), time.monotonic() - t0, hung


def expect(cond, what, detail=""):
    print(("ok   " if cond else "FAIL ") + what + ("" if cond else "  | " + detail[-1500:]))
    sys.stdout.flush()
    if not cond:
        FAILED.append(what)


def save(ckpt, root, it, *extra, timeout=120):
    model = [] if "--model" in extra else ["--model", "tiny"]
    return run([ckpt, "save", "--root", root, "--iter", str(it), "--layout", "tp=1", "--chunk-kb", "8"] + model +
               list(extra), timeout=timeout)


def rewrite_manifest(path, mutate):
    data = open(path, "rb").read().decode()
    body = data[data.index("\n") + 1:]
    m = json.loads("{" + body)
    mutate(m)
    text = json.dumps(m, sort_keys=True, separators=(",", ":"))[1:]
    with open(path, "wb") as f:
        f.write(('{"manifest_sha256":"' + hashlib.sha256(text.encode()).hexdigest() + '",\n' + text).encode())


def flip_byte(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x40]))


def base_root(ckpt, scratch, name, iters):
    root = os.path.join(scratch, name)
    shutil.rmtree(root, ignore_errors=True)
    for it in iters:
        rc, out, err, _, _ = save(ckpt, root, it)
        if rc != 0:
            raise SystemExit("setup save %d failed: %s %s" % (it, out, err))
    return root


def it_dir(root, it):
    return os.path.join(root, "iter_%07d" % it)


# ---- item 3 -------------------------------------------------------------------
def case_fallback(ckpt, scratch, args):
    damages = {
        "manifest_bitflip": lambda r: flip_byte(os.path.join(it_dir(r, 3), "manifest.json"), 200),
        "manifest_deleted": lambda r: os.remove(os.path.join(it_dir(r, 3), "manifest.json")),
        "manifest_truncated": lambda r: os.truncate(os.path.join(it_dir(r, 3), "manifest.json"), 100),
        "shard_deleted": lambda r: os.remove(os.path.join(it_dir(r, 3), "rank_00000.h5")),
        "shard_bitflip": lambda r: flip_byte(os.path.join(it_dir(r, 3), "rank_00000.h5"), chunk_offset(r, 3) + 3),
        "tracker_missing_iter": lambda r: open(os.path.join(r, "latest_checkpointed_iteration.txt"), "w").write("4\n"),
        "tracker_garbage": lambda r: open(os.path.join(r, "latest_checkpointed_iteration.txt"), "w").write("x\n"),
        # A valid self-hash whose content the planner rejects (InvalidArgument: dtype, shape).
        "dtype_changed": lambda r: rewrite_manifest(
            os.path.join(it_dir(r, 3), "manifest.json"),
            lambda m: m["tensors"]["embedding.word_embeddings.weight"].update(dtype="fp16")),
        "shape_changed": lambda r: rewrite_manifest(
            os.path.join(it_dir(r, 3), "manifest.json"), lambda m: shape_change(m)),
    }
    base = base_root(ckpt, scratch, "fallback_base", [1, 2, 3])
    for name, damage in damages.items():
        root = os.path.join(scratch, "fallback_" + name)
        shutil.rmtree(root, ignore_errors=True)
        shutil.copytree(base, root)
        damage(root)
        want = 3 if name.startswith("tracker_") else 2
        rc, out, err, secs, hung = run([ckpt, "load", "--root", root, "--fallback", "--json"], timeout=120)
        got = None
        for line in out.splitlines():
            if line.startswith("{"):
                got = json.loads(line).get("iteration")
        expect(rc == 0 and got == want and re.search(r"skipped", err),
               "fallback %-22s: load --fallback exits 0, loads iteration %d, says what it skipped (rc %s, iteration %s)"
               % (name, want, rc, got), out + err)


def chunk_offset(root, it):
    """File offset of the first chunk of the first tensor in iteration `it` (inside the data)."""
    data = open(os.path.join(it_dir(root, it), "manifest.json"), "rb").read().decode()
    m = json.loads("{" + data[data.index("\n") + 1:])
    key = sorted(m["tensors"])[0]
    return m["tensors"][key]["shards"][0]["chunks"][0][0]


def shape_change(m):
    t = m["tensors"]["decoder.final_layernorm.weight"]
    t["global_shape"] = [t["global_shape"][0] * 2]
    for s in t["shards"]:
        s["local_shape"] = [s["local_shape"][0]]
    # the doubled tensor is now half covered: still a bad iteration to load


# ---- item 4 -------------------------------------------------------------------
def case_lagging(ckpt, scratch, args):
    root = base_root(ckpt, scratch, "lagging", [1, 2])
    open(os.path.join(root, "latest_checkpointed_iteration.txt"), "w").write("1\n")
    flip_byte(os.path.join(it_dir(root, 2), "manifest.json"), 300)
    rc, out, err, _, _ = run([ckpt, "verify", root])
    expect(rc == 1 and "iteration 2" in out + err,
           "lagging: verify (latest) exits 1 and names the damaged newer iteration 2 (rc %s)" % rc, out + err)
    rc, out, err, _, _ = run([ckpt, "verify", root, "--all"])
    expect(rc == 1 and re.search(r"iter_0000002|iteration 2", out + err),
           "lagging: verify --all verifies every iteration, exits 1 on iteration 2 (rc %s)" % rc, out + err)
    rc, out, err, _, _ = run([ckpt, "verify", root, "--iter", "1"])
    expect(rc == 0, "lagging: verify --iter 1 exits 0 (rc %s)" % rc, out + err)
    rc, out, err, _, _ = run([ckpt, "load", "--root", root, "--json"])
    expect(rc == 0 and re.search(r"warning: loaded iteration 1, not the latest: skipped newer iter_0000002", err),
           "lagging: load loads 1 and warns that it skipped the newer iter_0000002 (rc %s)" % rc, out + err)


# ---- item 6 -------------------------------------------------------------------
def launch(cmd):
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, start_new_session=True)


def case_concurrent(ckpt, scratch, args):
    rounds, n = 3, 6
    lost, misleading, total = 0, 0, 0
    for r in range(rounds):
        root = os.path.join(scratch, "concurrent_%d" % r)
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        procs = [(it, launch([ckpt, "save", "--root", root, "--model", "tiny", "--iter", str(it), "--layout", "tp=1",
                              "--chunk-kb", "4", "--allow-older"])) for it in range(1, n + 1)]
        for it, p in procs:
            out, err = p.communicate(timeout=300)
            total += 1
            ok = p.returncode == 0 and os.path.isfile(os.path.join(it_dir(root, it), "manifest.json"))
            if not ok:
                lost += 1
                print("  lost iteration %d (rc %s): %s" % (it, p.returncode, err.decode(errors="replace")[-400:]))
        rc, out, err, _, _ = run([ckpt, "verify", root, "--all"])
        expect(rc == 0, "concurrent round %d: every committed iteration verifies" % r, out + err)
    expect(lost == 0, "concurrent: %d saves of different iterations, %d lost" % (total, lost))
    # Same iteration: exactly one wins; the losers say why (never NotFound).
    for r in range(rounds):
        root = os.path.join(scratch, "same_%d" % r)
        shutil.rmtree(root, ignore_errors=True)
        os.makedirs(root)
        procs = [launch([ckpt, "save", "--root", root, "--model", "tiny", "--iter", "7", "--layout", "tp=1",
                         "--chunk-kb", "4"]) for _ in range(4)]
        results = [(p.wait(timeout=300), p.communicate()[1].decode(errors="replace")) for p in procs]
        wins = sum(1 for rc, _ in results if rc == 0)
        for rc, err in results:
            if rc != 0 and not re.search(r"already exists|is being saved by", err):
                misleading += 1
                print("  misleading loser message: " + err[-400:])
        expect(wins == 1, "same-iteration round %d: exactly one of 4 saves wins (%d won)" % (r, wins))
    expect(misleading == 0, "same-iteration: every loser says 'already exists' or 'is being saved by' (%d did not)"
           % misleading)


# ---- item 7 -------------------------------------------------------------------
def case_older(ckpt, scratch, args):
    root = base_root(ckpt, scratch, "older", [30])
    rc, out, err, _, _ = save(ckpt, root, 10)
    expect(rc == 2 and "already holds iteration 30" in err and not os.path.exists(it_dir(root, 10)),
           "older: save --iter 10 below iteration 30 is refused (rc %s), nothing written" % rc, out + err)
    rc, out, err, _, _ = save(ckpt, root, 10, "--allow-older")
    expect(rc == 0 and os.path.isdir(it_dir(root, 10)) and "allow-older" in out + err,
           "older: --allow-older saves it and says why 'latest' still picks 30 (rc %s)" % rc, out + err)
    # ckpt train checks the root at start-up (before any step), not after all steps.
    troot = os.path.join(scratch, "older_train")
    shutil.rmtree(troot, ignore_errors=True)
    rc, out, err, _, _ = run([ckpt, "train", "--root", troot, "--model", "tiny", "--steps", "4", "--save-at", "4"])
    expect(rc == 0, "older: train saves iteration 4 into a fresh root (rc %s)" % rc, out + err)
    rc, out, err, secs, _ = run([ckpt, "train", "--root", troot, "--model", "tiny", "--steps", "2", "--save-at", "2"])
    expect(rc == 2 and re.search(r"already holds iteration 4", err) and "step" not in out.lower(),
           "older: a new train run saving 2 below 4 is refused at start-up (rc %s, %.1f s)" % (rc, secs), out + err)


# ---- item 8 -------------------------------------------------------------------
def case_small(ckpt, scratch, args):
    root = os.path.join(scratch, "small")
    shutil.rmtree(root, ignore_errors=True)
    rc, out, err, _, _ = save(ckpt, root, -5)
    expect(rc == 2 and not os.path.exists(it_dir(root, 0)), "small: save --iter -5 is refused (rc %s)" % rc,
           out + err)
    root = base_root(ckpt, scratch, "small_tracker", [1])
    open(os.path.join(root, "latest_checkpointed_iteration.txt"), "wb").write(b"\x1b[31mred\x07\n")
    rc, out, err, _, _ = run([ckpt, "verify", root])
    expect(rc in (1, 2) and "\x1b" not in err and "\x07" not in err and "\\x1b" in err,
           "small: tracker errors escape control characters (rc %s)" % rc, repr(err))
    rc, out, err, secs, hung = save(ckpt, os.path.join(scratch, "small_llama"), 1, "--model", "llama70b", timeout=60)
    expect(rc == 2 and "simulation-only" in err and not hung,
           "small: save --model llama70b is refused as simulation-only (rc %s, %.1f s)" % (rc, secs), out + err)
    # Offline reshard of a `ckpt train` checkpoint (optimizer under metadata.train), then resume from it.
    troot, rroot = os.path.join(scratch, "small_train"), os.path.join(scratch, "small_train_tp2")
    for r in (troot, rroot):
        shutil.rmtree(r, ignore_errors=True)
    rc, out, err, _, _ = run([ckpt, "train", "--root", troot, "--model", "tiny", "--steps", "2", "--save-at", "2"])
    expect(rc == 0, "small: train saves iteration 2 (rc %s)" % rc, out + err)
    rc, out, err, _, _ = run([ckpt, "reshard", troot, rroot, "--to", "tp=2"])
    expect(rc == 0, "small: ckpt reshard rewrites a train checkpoint under tp=2 (rc %s)" % rc, out + err)
    mpirun = shlex.split(args.get("mpirun", "mpirun --allow-run-as-root --oversubscribe"))
    rc, out, err, _, _ = run(mpirun + ["-np", "2", ckpt, "train", "--root", rroot, "--model", "tiny", "--layout", "tp=2",
                                       "--steps", "3", "--resume"], timeout=300)
    expect(rc == 0 and "saved iteration 3" in out,
           "small: train --resume under tp=2 from the resharded checkpoint (rc %s)" % rc, out + err)


# ---- item 5 -------------------------------------------------------------------
def case_hang(ckpt, scratch, args):
    mpirun = shlex.split(args.get("mpirun", "mpirun --allow-run-as-root --oversubscribe"))
    deadline_ms = 3000
    root = os.path.join(scratch, "hang")
    for r in (root, root + "_t0", root + "_t5"):
        shutil.rmtree(r, ignore_errors=True)
    log = os.path.join(scratch, "hang_faults.jsonl")
    if os.path.exists(log):
        os.remove(log)
    # Rank 2 sleeps in the vote step, then this script SIGSTOPs it (a stopped rank).
    cmd = mpirun + ["-np", "4", ckpt, "train", "--root", root, "--model", "tiny", "--layout", "dp=4",
                    "--steps", "2", "--save-at", "2", "--timeout-ms", str(deadline_ms),
                    "--faults", "point=step.vote rank=2 action=delay ms=20000", "--faults-log", log]
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV, start_new_session=True)
    stopped = None
    while p.poll() is None and time.monotonic() - t0 < 60:
        if stopped is None and os.path.exists(log) and os.path.getsize(log) > 0:
            pid = rank_pid(2, ckpt)
            if pid:
                os.kill(pid, signal.SIGSTOP)
                stopped = time.monotonic()
        time.sleep(0.05)
    hung = p.poll() is None
    if hung:
        os.killpg(p.pid, signal.SIGKILL)
    out, err = p.communicate()
    out, err = out.decode(errors="replace"), err.decode(errors="replace")
    end = time.monotonic()
    after = end - stopped if stopped else -1
    expect(stopped is not None, "hang: rank 2 was SIGSTOPped in the vote step")
    expect(not hung and after <= deadline_ms / 1000.0 + 8,
           "hang: mpirun returned %.1f s after the SIGSTOP (deadline %.1f s), exit %s" %
           (after, deadline_ms / 1000.0, p.returncode), out + err)
    expect(p.returncode not in (0, None) and re.search(r"rank\(s\) 2.*phase 'vote'", err),
           "hang: survivors name rank 2 and phase 'vote', non-zero exit", err)
    print("hang: job ended %.1f s after the stop (deadline %d ms), exit %s" % (after, deadline_ms, p.returncode))
    rc, out, err, _, _ = run([ckpt, "save", "--root", root + "_t0", "--model", "tiny", "--iter", "1",
                              "--timeout-ms", "0"])
    expect(rc == 2 and "timeout-ms" in err, "hang: --timeout-ms 0 exits 2 with a message (rc %s)" % rc, out + err)
    rc, out, err, _, _ = run([ckpt, "save", "--root", root + "_t5", "--model", "tiny", "--iter", "1",
                              "--timeout-ms", "-5"])
    expect(rc == 2 and "timeout-ms" in err, "hang: --timeout-ms -5 exits 2 with a message (rc %s)" % rc, out + err)


def rank_pid(rank, ckpt):
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            env = open("/proc/%s/environ" % d, "rb").read().split(b"\0")
            cmd = open("/proc/%s/cmdline" % d, "rb").read().split(b"\0")
        except OSError:
            continue
        if cmd and os.path.basename(cmd[0].decode(errors="replace")) == os.path.basename(ckpt) and \
                ("OMPI_COMM_WORLD_RANK=%d" % rank).encode() in env:
            return int(d)
    return None


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    ckpt, scratch, case = sys.argv[1], sys.argv[2], sys.argv[3]
    args = {}
    rest = sys.argv[4:]
    while rest:
        if rest[0] == "--mpirun":
            args["mpirun"] = rest[1]
            rest = rest[2:]
        else:
            rest = rest[1:]
    os.makedirs(scratch, exist_ok=True)
    globals()["case_" + case](ckpt, scratch, args)
    print("%s: %d failed" % (case, len(FAILED)))
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
