#!/usr/bin/env python3
"""Hostile manifests (issue 16 item 1): a manifest is untrusted input even when
its self-hash is valid.

Saves small real checkpoints with `ckpt save` (world 1), then for every case of
the corpus below copies an iteration, changes its manifest (or its files),
rewrites the self-hash so the manifest "verifies", and runs `ckpt verify` and
`ckpt load --no-check` on it. Every run must end within the deadline, with exit
1 (damage) or 2 (invalid input), a message naming the field (or file), and a
bounded peak RSS; never a crash (signal, exit 134/139), a hang or exit 0.

Usage: hostile_manifests.py <ckpt binary> <scratch dir> [--only NAME] [--write-corpus DIR]
--write-corpus writes each hostile manifest to DIR (seed corpus for the fuzzer).
"""
import argparse
import copy
import hashlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time

PREFIX = '{"manifest_sha256":"'
DEADLINE_S = 30
MAX_RSS_MB = 768


def read_manifest(path):
    with open(path, "rb") as f:
        data = f.read().decode()
    body = data[data.index("\n") + 1:]
    return json.loads("{" + body)


def write_manifest_text(path, body_text):
    # body_text: the JSON object without its opening brace.
    digest = hashlib.sha256(body_text.encode()).hexdigest()
    with open(path, "wb") as f:
        f.write((PREFIX + digest + '",\n' + body_text).encode())


def write_manifest(path, m):
    text = json.dumps(m, sort_keys=True, separators=(",", ":"))
    write_manifest_text(path, text[1:])


def first_shard(m, multi_chunk=False):
    for key in sorted(m["tensors"]):
        t = m["tensors"][key]
        for s in t["shards"]:
            if not multi_chunk or len(s["chunks"]) > 1:
                return key, t, s
    raise RuntimeError("no shard")


# ---- the corpus: (name, mutate(manifest, iter_dir) -> manifest or None, field named) ----
# mutate may also return a raw body string (for malformed JSON shapes).

def set_chunk(i, value):
    def f(m, d):
        _, _, s = first_shard(m)
        s["chunks"][0][i] = value
        return m
    return f


def set_shard(field, value, multi_chunk=False):
    def f(m, d):
        _, _, s = first_shard(m, multi_chunk)
        s[field] = value
        return m
    return f


def set_tensor(field, value):
    def f(m, d):
        _, t, _ = first_shard(m)
        t[field] = value
        return m
    return f


def set_file(field, value):
    def f(m, d):
        m["files"][0][field] = value
        return m
    return f


def set_gpt(field, value):
    """Sets a field of the recorded GPT config (metadata "model": {"family": "megatron_gpt", "config"})."""
    def f(m, d):
        m["metadata"]["model"]["config"][field] = value
        return m
    return f


def set_model(key, value):
    def f(m, d):
        m["metadata"]["model"][key] = value
        return m
    return f


def huge_box(m, d):
    _, t, s = first_shard(m)
    t["global_shape"] = [2**32, 2**32]
    s["global_offset"] = [0, 0]
    s["local_shape"] = [2**32, 2**32]
    return m


def zstd_bomb(m, d):
    _, _, s = first_shard(m)
    s["compression"] = "zstd"
    s["chunk_elems"] = 2**34
    return m


def deep_nesting(m, d):
    # 100,000 nested arrays inside the metadata (copied, dumped, read by load).
    m["metadata"]["deep"] = "@DEEP@"
    text = json.dumps(m, sort_keys=True, separators=(",", ":"))[1:]
    return text.replace('"@DEEP@"', "[" * 100000 + "]" * 100000)


def empty_chunks(m, d):
    _, _, s = first_shard(m)
    s["chunks"] = []
    return m


def duplicate_shard(m, d):
    _, t, s = first_shard(m)
    t["shards"].append(copy.deepcopy(s))
    return m


def half_box_twice(m, d):
    # Two shards on one box: the second claims the first's box, the tensor's
    # other half is left uncovered (the loader must check coverage too).
    for key in sorted(m["tensors"]):
        t = m["tensors"][key]
        if len(t["global_shape"]) == 2 and len(t["shards"]) == 1 and t["global_shape"][0] >= 2:
            t["global_shape"] = [t["global_shape"][0] * 2, t["global_shape"][1]]
            t["shards"].append(copy.deepcopy(t["shards"][0]))
            return m
    raise RuntimeError("no 2-d tensor")


def other_dir(m, d):
    m["files"][0]["name"] = "../iter_0000001/" + m["files"][0]["name"]
    return m


def fifo_file(m, d):
    path = os.path.join(d, m["files"][0]["name"])
    os.remove(path)
    os.mkfifo(path)
    return None  # manifest unchanged: the file the manifest names is a FIFO


def fifo_named(m, d):
    os.mkfifo(os.path.join(d, "fifo"))
    m["files"][0]["name"] = "fifo"
    return m


def dir_named(m, d):
    os.mkdir(os.path.join(d, "subdir"))
    m["files"][0]["name"] = "subdir"
    return m


def sha_not_hex(m, d):
    _, _, s = first_shard(m)
    s["chunks"][0][2] = "zz" * 32
    return m


def chunk_arity(m, d):
    _, _, s = first_shard(m)
    s["chunks"][0] = [0, 1]
    return m


def chunk_count(m, d):
    _, _, s = first_shard(m, multi_chunk=True)
    s["chunks"].pop()
    return m


def chunk_overlap(m, d):
    _, _, s = first_shard(m, multi_chunk=True)
    s["chunks"][1][0] = s["chunks"][0][0]
    return m


def dup_file(m, d):
    m["files"].append(copy.deepcopy(m["files"][0]))
    return m


def many_dims(m, d):
    _, t, s = first_shard(m)
    t["global_shape"] = [1] * 5000
    s["global_offset"] = [0] * 5000
    s["local_shape"] = [1] * 5000
    return m


def object_size(m, d):
    key = sorted(m["objects"])[0]
    m["objects"][key]["shards"][0]["size"] = 2**62
    return m


def object_offset(m, d):
    key = sorted(m["objects"])[0]
    m["objects"][key]["shards"][0]["global_offset"] = [2**40] * len(m["objects"][key]["global_shape"])
    return m


def object_grid(m, d):
    key = sorted(m["objects"])[0]
    o = m["objects"][key]
    o["global_shape"] = [2**40] * 3
    o["shards"][0]["global_offset"] = [0] * 3
    return m


def tensors_array(m, d):
    m["tensors"] = [1, 2]
    return m


CASES = [
    ("stored_size_1e12", set_chunk(1, 10**12), "stored_size"),
    ("stored_size_u64max", set_chunk(1, 2**64 - 1), "stored_size"),
    ("stored_size_minus1", set_chunk(1, -1), "stored_size"),
    ("stored_size_2p31", set_chunk(1, 2**31), "stored_size"),
    ("file_offset_u64max", set_chunk(0, 2**64 - 1), "file_offset"),
    ("file_offset_past_end", set_chunk(0, 2**40), "file_offset"),
    ("sha256_not_hex", sha_not_hex, "sha256"),
    ("chunk_not_triple", chunk_arity, "chunks"),
    ("zstd_chunk_elems_2p34", zstd_bomb, "chunk_elems"),
    ("chunk_elems_zero", set_shard("chunk_elems", 0), "chunk_elems"),
    ("chunk_elems_minus1", set_shard("chunk_elems", -1), "chunk_elems"),
    ("chunk_elems_not_rows", set_shard("chunk_elems", 7, multi_chunk=True), "chunk_elems"),
    ("chunk_missing", chunk_count, "chunks"),
    ("chunk_overlap", chunk_overlap, "chunks"),
    ("chunks_empty", empty_chunks, "chunks"),
    ("nested_100000", deep_nesting, "depth"),
    ("global_shape_2p32_squared", huge_box, "global_shape"),
    ("shape_5000_dims", many_dims, "global_shape|global_offset"),  # all three have 5000 dims
    ("global_offset_negative", set_shard("global_offset", [-1, 0]), "global_offset"),
    ("flat_range_reversed", set_shard("flat_range", [5, 2]), "flat_range"),
    ("dtype_unknown", set_tensor("dtype", "float128"), "dtype"),
    ("file_index_2p40", set_shard("file", 2**40), "file"),
    ("file_index_minus1", set_shard("file", -1), "file"),
    ("file_index_string", set_shard("file", "0"), "file"),
    ("file_name_parent", other_dir, "name"),
    ("file_name_absolute", set_file("name", "/etc/passwd"), "name"),
    ("file_name_empty", set_file("name", ""), "name"),
    ("file_name_dotdot", set_file("name", ".."), "name"),
    ("file_size_minus1", set_file("size", -1), "size"),
    ("file_rank_2p40", set_file("rank", 2**40), "rank"),
    ("file_duplicate", dup_file, "name"),
    ("file_is_fifo", fifo_file, "regular|size"),
    ("file_named_fifo", fifo_named, "regular|size"),
    ("file_named_dir", dir_named, "regular|size"),
    ("two_shards_one_box", duplicate_shard, "cover|overlap"),
    ("half_box_twice", half_box_twice, "cover|overlap"),
    ("object_size_2p62", object_size, "size"),
    ("object_offset_outside", object_offset, "global_offset"),
    ("object_grid_2p120", object_grid, "global_shape"),
    ("tensors_not_object", tensors_array, "tensors"),
    ("iteration_negative", lambda m, d: dict(m, iteration=-1), "iteration"),
    ("metadata_model_int", lambda m, d: (m["metadata"].update(model=5), m)[1], "model"),
    ("metadata_not_object", lambda m, d: dict(m, metadata=[1]), "metadata"),
    ("metadata_model_config_string", set_model("config", "x"), "config"),
    ("metadata_model_family_unknown", set_model("family", "no_such_family"), "no_such_family"),
    ("metadata_model_family_int", set_model("family", 5), "family"),
    ("gpt_hidden_1e7", set_gpt("hidden", 10**7), "model"),
    ("gpt_num_layers_1e6", set_gpt("num_layers", 10**6), "model"),
    ("gpt_vocab_1e15", set_gpt("vocab_size", 10**15), "model"),
    ("gpt_hidden_float", set_gpt("hidden", 64.5), "hidden"),
    ("gpt_experts_1e6", set_gpt("num_experts", 10**6), "model"),
    ("metadata_optimizer_format_int",
     lambda m, d: (m["metadata"].update(optimizer={"format": 5}), m)[1], "optimizer"),
]


def run(cmd, env):
    """Runs cmd with a deadline; returns (rc, stdout, stderr, hung, seconds, peak RSS MB of it)."""
    import tempfile
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
        def limits():
            os.setsid()
            resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # protect the shared machine
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, env=env, preexec_fn=limits)
        hung = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid == p.pid:
                break
            if time.monotonic() - t0 > DEADLINE_S:
                os.killpg(p.pid, 9)
                pid, status, ru = os.wait4(p.pid, 0)
                hung = True
                break
            time.sleep(0.02)
        p.returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
    secs = time.monotonic() - t0
    return (p.returncode, out.decode(errors="replace"), err.decode(errors="replace"), hung, secs,
            ru.ru_maxrss / 1024.0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("scratch")
    ap.add_argument("--only")
    ap.add_argument("--write-corpus")
    args = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl="self,vader")
    shutil.rmtree(args.scratch, ignore_errors=True)
    base = os.path.join(args.scratch, "base")
    for it in (1, 2):
        rc, out, err, hung, _, _ = run([args.ckpt, "save", "--root", base, "--model", "tiny:extra_state=true",
                                        "--iter", str(it),
                                     "--chunk-kb", "4", "--layout", "tp=1"], env)
        if rc != 0:
            print("setup save failed:", rc, out, err)
            return 2
    failures = []
    for name, mutate, field in CASES:
        if args.only and name not in args.only.split(","):
            continue
        root = os.path.join(args.scratch, name)
        shutil.copytree(base, root)
        d = os.path.join(root, "iter_0000002")
        mpath = os.path.join(d, "manifest.json")
        m = read_manifest(mpath)
        new = mutate(m, d)
        if isinstance(new, str):
            write_manifest_text(mpath, new)
        elif new is not None:
            write_manifest(mpath, new)
        if args.write_corpus:
            os.makedirs(args.write_corpus, exist_ok=True)
            shutil.copy(mpath, os.path.join(args.write_corpus, name + ".json"))
        for tool, cmd in (("verify", [args.ckpt, "verify", root, "--iter", "2"]),
                          ("load", [args.ckpt, "load", "--root", root, "--iter", "2", "--no-check"])):
            rc, out, err, hung, secs, rss = run(cmd, env)
            text = out + err
            why = []
            if hung:
                why.append("hung (killed after %d s)" % DEADLINE_S)
            elif rc < 0:
                why.append("killed by signal %d" % -rc)
            elif rc not in (1, 2):
                why.append("exit %d (want 1 or 2)" % rc)
            # Metadata is opaque to verify (caller-defined): only `load` interprets it.
            meta_only = name.startswith(("gpt_", "metadata_model", "metadata_gpt", "metadata_optimizer"))
            if tool == "verify" and meta_only and not hung and rc in (0, 1, 2):
                why = []
            elif not hung and not re.search(field, text, re.I):
                why.append("message does not name '%s'" % field)
            if rss > MAX_RSS_MB:
                why.append("peak RSS %.0f MB > %d MB" % (rss, MAX_RSS_MB))
            line = text.strip().splitlines()[-1][:300] if text.strip() else ""
            status = "FAIL" if why else "ok"
            print("%-4s %-32s %-6s rc=%-4s %5.1fs rss=%6.0fMB %s | %s" %
                  (status, name, tool, rc, secs, rss, "; ".join(why), line))
            sys.stdout.flush()
            if why:
                failures.append((name, tool))
        shutil.rmtree(root, ignore_errors=True)
    total = len([c for c in CASES if not args.only or c[0] in args.only.split(",")]) * 2
    print("hostile manifests: %d runs, %d failed" % (total, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
