#!/usr/bin/env python3
"""Bounded inputs (issue 28 item 5): what an untrusted manifest may cost.

Each case builds a hostile iteration from a small real checkpoint (helpers of
hostile_manifests.py), runs `ckpt verify` and `ckpt load --no-check` on it and
requires exit 1 or 2 with a message naming the problem, within a time and a
peak-RSS budget (measured by wait4 on the child):

  duplicate_member   `"iteration":1,"iteration":2` (and a repeated shard
                     member) with a valid self-hash: refused, not "last wins";
  shards_1e5         one shard listed 10^5 times: refused early, small RSS;
  manifest_100mb     a 107 MB manifest (valid JSON, 3*10^5 tensors): verify
                     checks it in < 640 MB (main: 1.0 GB via a JSON DOM);
  manifest_over_cap  a (sparse) manifest one byte over kMaxManifestBytes:
                     refused by its size before it is read;
  file_size_1tib     files[0].size and the shard file (sparse) set to 1 TiB:
                     refused naming files[0].size before any read (verify used
                     to hash the TiB for ~50 min).

Usage: bounded_inputs.py <ckpt binary> <scratch dir> [--only NAME[,NAME]]
"""
import argparse
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hostile_manifests as hm  # noqa: E402

MAX_MANIFEST_BYTES = 1 << 30  # kMaxManifestBytes (ckpt/format/manifest.h)
TIB = 1 << 40
N_TENSORS = 300000  # ~100 MB of manifest


def body_text(m):
    import json
    return json.dumps(m, sort_keys=True, separators=(",", ":"))[1:]


def duplicate_member(m, d):
    text = body_text(m)
    assert '"iteration":2' in text
    return text.replace('"iteration":2', '"iteration":1,"iteration":2', 1)


def duplicate_shard_member(m, d):
    text = body_text(m)
    assert '"file":0,' in text
    return text.replace('"file":0,', '"file":0,"file":0,', 1)


def shards_1e5(m, d):
    _, t, s = hm.first_shard(m)
    t["shards"] = [s] * 100000
    return m


def manifest_100mb(m, d):
    # 3*10^5 one-element tensors, each one chunk in file 0: valid JSON and
    # fields, ~100 MB; the check runs to the end (the file is too small).
    _, t, s = hm.first_shard(m)
    tensors = {}
    for i in range(N_TENSORS):
        tensors["layer.%07d.weight" % i] = {
            "dtype": "fp32", "global_shape": [1],
            "shards": [{"chunk_elems": 1, "chunks": [[4096 + 4 * i, 4, "%064x" % i]], "compression": "none",
                        "dataset": "/t/layer.%07d.weight/extra_padding_to_make_a_realistic_name" % i,
                        "file": 0, "global_offset": [0], "local_shape": [1], "replica_id": [0, 0, 0],
                        "shuffle": False}]}
    m["tensors"] = tensors
    m["objects"] = {}
    m["files"][0]["size"] = 4096 + 4 * N_TENSORS + 4096
    return m


def manifest_over_cap(m, d):
    os.truncate(os.path.join(d, "manifest.json"), MAX_MANIFEST_BYTES + 1)
    return None


def file_size_1tib(m, d):
    os.truncate(os.path.join(d, m["files"][0]["name"]), TIB)
    m["files"][0]["size"] = TIB
    return m


# (name, mutate, pattern the message must match, deadline s, peak RSS MB per tool)
CASES = [
    ("duplicate_member", duplicate_member, r"iteration: member listed twice", 10, 100),
    ("duplicate_shard_member", duplicate_shard_member, r"\.file: member listed twice", 10, 100),
    ("shards_1e5", shards_1e5, r"shards\[1\]: overlaps shards\[0\] entirely", 10, 120),
    ("manifest_100mb", manifest_100mb, r"size", 90, 640),  # main: 1.0 GB, 44 s; verify only
    ("manifest_over_cap", manifest_over_cap, r"more than the limit", 10, 100),
    ("file_size_1tib", file_size_1tib, r"files\[0\]\.size: 1099511627776 bytes", 20, 100),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("scratch")
    ap.add_argument("--only")
    args = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,vader")
    shutil.rmtree(args.scratch, ignore_errors=True)
    base = os.path.join(args.scratch, "base")
    for it in (1, 2):
        rc, out, err, _, _, _ = hm.run([args.ckpt, "save", "--root", base, "--model", "tiny:extra_state=true",
                                        "--iter", str(it), "--chunk-kb", "4", "--layout", "tp=1"], env)
        if rc != 0:
            print("setup save failed:", rc, out, err)
            return 2
    failures = 0
    for name, mutate, pattern, deadline, max_rss in CASES:
        if args.only and name not in args.only.split(","):
            continue
        root = os.path.join(args.scratch, name)
        shutil.copytree(base, root)
        d = os.path.join(root, "iter_0000002")
        mpath = os.path.join(d, "manifest.json")
        new = mutate(hm.read_manifest(mpath), d)
        if isinstance(new, str):
            hm.write_manifest_text(mpath, new)
        elif new is not None:
            hm.write_manifest(mpath, new)
        hm.DEADLINE_S = deadline
        tools = (("verify", [args.ckpt, "verify", root, "--iter", "2"]),
                 ("load", [args.ckpt, "load", "--root", root, "--iter", "2", "--no-check"]))
        # load of 3*10^5 tensors costs minutes of planning on a shared CI host:
        # the manifest check (the point) is the same code as verify's.
        for tool, cmd in tools[:1] if name == "manifest_100mb" else tools:
            rc, out, err, hung, secs, rss = hm.run(cmd, env)
            text = out + err
            why = []
            if hung:
                why.append("hung (killed after %d s)" % deadline)
            elif rc not in (1, 2):
                why.append("exit %d (want 1 or 2)" % rc)
            elif not re.search(pattern, text):
                why.append("message does not match '%s'" % pattern)
            if rss > max_rss:
                why.append("peak RSS %.0f MB > %d MB" % (rss, max_rss))
            line = text.strip().splitlines()[-1][:240] if text.strip() else ""
            print("%-4s %-24s %-6s rc=%-4s %5.1fs rss=%6.0fMB %s | %s" %
                  ("FAIL" if why else "ok", name, tool, rc, secs, rss, "; ".join(why), line))
            sys.stdout.flush()
            failures += bool(why)
        shutil.rmtree(root, ignore_errors=True)
    print("bounded inputs: %d failed" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
