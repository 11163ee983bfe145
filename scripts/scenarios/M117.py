#!/usr/bin/env python3
# title: 静默损坏检测：per-chunk SHA-256、verify 与回退
# question: seeds/level8/M117.md
"""A TP2 job commits iterations 10 and 20. One bit (an exponent bit of one bf16
weight) is flipped inside a chunk of a committed shard file of iteration 20.
Measured: verify throughput on the clean checkpoint; verify exit code and the
file / tensor / chunk it names; a plain load refusing the damaged iteration; a
--fallback load (all ranks agree on the target) landing on iteration 10 with
every element checked; a damage campaign (bit flips, truncations, deletions).
Negative control: readers without ckpt's hashes - the loader with hash checks
off (faults run --no-hash-check), h5py (the datasets carry no HDF5 checksum
filter) and `ckpt fingerprint --no-verify` - return wrong data without error."""
import h5py
import numpy as np

from scenlib import *  # noqa: F403

MODEL, R, L = model(), path("ckpt"), "tp=2"
must("save10", mpi(L, "save", "--root", R, "--iter", 10, "--model", MODEL, "--json"))
must("save20", mpi(L, "save", "--root", R, "--iter", 20, "--model", MODEL, "--json"))
must("verify_clean", ck("verify", R, "--json"))
must("fp_clean", ck("fingerprint", R, "--json"))
target = path("ckpt", "iter_0000020", "rank_00001.h5")
with open(target, "rb") as src, open(path("clean_rank1.h5"), "wb") as dst:
    dst.write(src.read())

# Flip bit 6 of the high byte of one bf16 element in chunk 1 (or 0) of an fc1 shard of rank 1.
with h5py.File(target, "r") as f:
    names = sorted(nm for nm in f["tensors"] if ".mlp.linear_fc1.weight@" in nm)
    name = names[len(names) // 2]
    ds = f["tensors"][name]
    nchunks = ds.id.get_num_chunks()
    chunk = 1 if nchunks > 1 else 0
    info = ds.id.get_chunk_info(chunk)
    elem_in_chunk = 1000 % (info.size // 2)
    offset = info.byte_offset + 2 * elem_in_chunk + 1
    flat = chunk * int(np.prod(ds.chunks)) + elem_in_chunk
    fletcher = ds.fletcher32
with open(target, "r+b") as fh:
    fh.seek(offset)
    byte = fh.read(1)[0]
    fh.seek(offset)
    fh.write(bytes([byte ^ 0x40]))
flip = {"dataset": "/tensors/" + name, "chunk": chunk, "file": target, "flat": flat, "fletcher32": fletcher}

run_to("verify_bad", ck("verify", R, "--json", "--all"))
run_to("fp_nohash", ck("fingerprint", R, "--no-verify", "--json"))
run_to("fp_hash", ck("fingerprint", R, "--json"))
run_to("load_bad", mpi(L, "load", "--root", R, "--json"))
run_to("load_fb", mpi(L, "load", "--root", R, "--fallback", "--json"))
must("verify10", ck("verify", R, "--iter", 10, "--json"))
# The damage campaign, then the same with the loader's hash checks off (only the element check remains).
must("camp", ck("faults", "run", "--work", path("dmg"), "--layout", "tp=2", "--model", "tiny", "--variants", "damage",
                "--quiet", "--mpirun", MPIRUN_STR, "--json", path("camp_report.out")))
run_to("camp_nohash", ck("faults", "run", "--work", path("dmg_nohash"), "--layout", "tp=2", "--model", "tiny",
                         "--variants", "damage", "--no-hash-check", "--quiet", "--mpirun", MPIRUN_STR, "--json",
                         path("camp_nohash_report.out")))  # finds torn states: exit != 0

clean, bad = J("verify_clean"), J("verify_bad")
issues = bad.get("issues", [])
hit = issues[0] if issues else {}
fb = J("load_fb") if RC("load_fb") == 0 else {}


def bf16(u16):
    return (u16.astype(np.uint32) << 16).view(np.float32)


with h5py.File(flip["file"], "r") as f, h5py.File(path("clean_rank1.h5"), "r") as g:
    d, c = f[flip["dataset"]][()].reshape(-1), g[flip["dataset"]][()].reshape(-1)
diff = np.flatnonzero(d != c)
was, read = float(bf16(c[flat:flat + 1])[0]), float(bf16(d[flat:flat + 1])[0])
n = {
    "verify_chunks": clean["chunks"], "verify_bytes": clean["bytes"], "verify_mb_per_s": round(clean["mb_per_s"]),
    "verify_bad_rc": RC("verify_bad"), "issues": len(issues),
    "named_chunk": hit.get("chunk", -1), "named_tensor": hit.get("tensor", ""),
    "load_bad_rc": RC("load_bad"),
    "fallback_rc": RC("load_fb"), "fallback_iteration": fb.get("iteration", -1),
    "fallback_elements": fb.get("elements_checked", 0), "fallback_mismatches": fb.get("mismatches", -1),
}
ca, cb = J("camp_report")["damage"], J("camp_nohash_report")["damage"]


def dsum(d_, k):
    return sum(x[k] for x in d_.values())


n.update({"campaign_damage_runs": dsum(ca, "runs"), "campaign_verify_named": dsum(ca, "verify_named"),
          "campaign_load_detected": dsum(ca, "load_detected"), "campaign_torn": dsum(ca, "torn"),
          "campaign_failed": dsum(ca, "failed")})
fpc = J("fp_clean")
fpn = J("fp_nohash") if RC("fp_nohash") == 0 else {}
nc = {"h5py_error": False, "h5py_elements_changed": int(diff.size), "value_was": was, "value_read": read,
      "hdf5_checksum_filter": bool(flip["fletcher32"]),
      "nohash_fingerprint_rc": RC("fp_nohash"), "nohash_digest_changed": fpn.get("digest", fpc["digest"]) != fpc["digest"],
      "hashed_fingerprint_rc": RC("fp_hash"),
      "nohash_bitflips": cb["bitflip"]["runs"], "nohash_bitflips_torn": cb["bitflip"]["torn"]}
checks = [
    ("clean checkpoint verifies", clean["ok"] and clean["issues"] == []),
    ("verify exits 1 and names exactly the damaged file/dataset/chunk",
     RC("verify_bad") == 1 and len(issues) == 1 and hit.get("dataset") == flip["dataset"]
     and hit.get("chunk") == flip["chunk"] and hit.get("file") == flip["file"]),
    ("plain load refuses the damaged iteration (non-zero exit, sha256 mismatch named)",
     RC("load_bad") != 0 and "sha256 mismatch" in TXT("load_bad")),
    ("--fallback on every rank lands on iteration 10 with 0 mismatches",
     RC("load_fb") == 0 and fb.get("iteration") == 10 and fb.get("mismatches") == 0),
    ("damage campaign: verify names every damage, the loader detects every read damage, nothing torn",
     n["campaign_verify_named"] == n["campaign_damage_runs"] and n["campaign_torn"] == 0 and n["campaign_failed"] == 0),
]
emit("静默损坏检测：per-chunk SHA-256、verify 与回退",
     f"{J('save20')['model']} TP2, iterations 10 and 20; one bit flipped in chunk {chunk} of {flip['dataset']} (iter 20, rank 1)",
     n, checks,
     "每个 chunk 的 SHA-256 在写入时计算并记在自哈希的 manifest 里：verify 重算即可定位到文件/张量/chunk，加载时同样校验并拒绝；"
     "多 rank --fallback 由所有 rank 一致地退回最新一个能通过校验的已提交 iteration，不会交出损坏的数据",
     "不校验哈希的读者：关掉哈希的 ckpt 加载（faults run --no-hash-check）、h5py 直接读（数据集没有 HDF5 校验 filter）、fingerprint --no-verify",
     nc, nc["nohash_bitflips_torn"] > 0 and nc["h5py_elements_changed"] > 0 and not nc["hdf5_checksum_filter"]
     and RC("fp_nohash") == 0 and nc["nohash_digest_changed"] and RC("fp_hash") != 0,
     headline="verify {verify_chunks} chunks / {verify_bytes} B @ {verify_mb_per_s} MB/s；翻 1 bit 后 verify rc={verify_bad_rc}，"
              "{issues} 个问题，指向 {named_tensor} chunk {named_chunk}；直接 load rc={load_bad_rc}；"
              "--fallback rc={fallback_rc} → iter {fallback_iteration}（{fallback_mismatches} mismatch）；损坏战役 "
              "{campaign_damage_runs} 次：verify 点名 {campaign_verify_named}、加载发现 {campaign_load_detected}、撕裂 {campaign_torn}",
     headline_en="verify {verify_chunks} chunks / {verify_bytes} B at {verify_mb_per_s} MB/s; after one flipped bit "
                 "verify rc={verify_bad_rc}, {issues} issue naming {named_tensor} chunk {named_chunk}; plain load "
                 "rc={load_bad_rc}; --fallback rc={fallback_rc} -> iteration {fallback_iteration} ({fallback_mismatches} "
                 "mismatches); damage campaign {campaign_damage_runs} runs: verify named {campaign_verify_named}, "
                 "load detected {campaign_load_detected}, torn {campaign_torn}",
     nc_headline="关掉加载哈希后 {nc.nohash_bitflips} 次 bit flip 中 {nc.nohash_bitflips_torn} 次被当作新检查点读出错误数据；"
                 "h5py 无报错读出 {nc.h5py_elements_changed} 个错元素：{nc.value_was:.6f} → {nc.value_read:.6e}；"
                 "fingerprint --no-verify rc={nc.nohash_fingerprint_rc}、摘要已变={nc.nohash_digest_changed}（校验哈希时 rc={nc.hashed_fingerprint_rc}）",
     nc_headline_en="with load hashing off {nc.nohash_bitflips_torn} of {nc.nohash_bitflips} bit flips were read as "
                    "the new checkpoint with wrong data; h5py read {nc.h5py_elements_changed} wrong element without "
                    "error: {nc.value_was:.6f} -> {nc.value_read:.6e}; fingerprint --no-verify rc="
                    "{nc.nohash_fingerprint_rc}, digest changed={nc.nohash_digest_changed} (hashed: rc={nc.hashed_fingerprint_rc})")
