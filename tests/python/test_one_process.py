"""ckpt Python API in one process: descriptors, round trips of torch and numpy
data (every dtype), objects, flat-range fragments, allow_shape_mismatch,
strict modes, async save, read helpers, bf16 numpy interop, errors."""
import os
import pickle

import numpy as np
import pytest
import torch

import ckpt

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int16,
          torch.int8, torch.uint8, torch.bool]


def pattern(shape, dtype, seed=0):
    n = int(np.prod(shape)) if shape else 1
    v = torch.arange(n, dtype=torch.float64).reshape(shape) * 0.25 + seed
    return (v % 2).to(dtype) if dtype == torch.bool else (v % 100).to(dtype)


@pytest.fixture
def root(tmp_path):
    return str(tmp_path / "ck")


def test_every_dtype_round_trips_zero_copy(root):
    src = {str(d): pattern((5, 7), d) for d in DTYPES}
    sd = {k: ckpt.ShardedTensor.from_rank_offsets(k, v) for k, v in src.items()}
    st = ckpt.save(sd, root, 1, compress="zstd")
    assert st["iteration"] == 1 and st["shards_written"] == len(DTYPES)
    dst = {k: torch.zeros_like(v) for k, v in src.items()}
    ptrs = {k: v.data_ptr() for k, v in dst.items()}
    out = ckpt.load({k: ckpt.ShardedTensor.from_rank_offsets(k, v) for k, v in dst.items()}, root)
    for k in src:
        assert torch.equal(dst[k], src[k]), k
        assert out[k] is dst[k] and dst[k].data_ptr() == ptrs[k]  # filled in place


def test_numpy_arrays_and_strided_views(root):
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    ckpt.save({"a": ckpt.ShardedTensor.from_rank_offsets("a", a)}, root, 1)
    # Load column halves into strided views (staged, then copied back).
    full = np.zeros((6, 4), dtype=np.float32)
    view = full.T  # not C-contiguous
    t = torch.zeros(4, 6)
    ckpt.load({"a": ckpt.ShardedTensor.from_rank_offsets("a", view)}, root)
    ckpt.load({"x": ckpt.ShardedTensor.from_rank_offsets("a", t.t().t()[:, :3], (1, 0, 2)),
               "y": ckpt.ShardedTensor.from_rank_offsets("a", t[:, 3:], (1, 1, 2))}, root)
    assert np.array_equal(view, a) and np.array_equal(t.numpy(), a)


def test_objects_round_trip_any_picklable(root):
    rng = torch.get_rng_state()
    objs = {"args": {"lr": 1e-4, "layers": [1, 2]}, "rng": rng, "it": (np.arange(3), "x")}
    sd = {k: ckpt.ShardedObject(k, v) for k, v in objs.items()}
    sd["per_rank"] = [ckpt.ShardedObject("cell", f"cell{i}", (3,), (i,)) for i in range(3)]
    ckpt.save(sd, root, 2)
    back = ckpt.load({k: ckpt.ShardedObject(k, None) for k in objs} |
                     {"cells": [ckpt.ShardedObject("cell", None, (3,), (i,)) for i in (2, 0)]}, root)
    assert back["args"] == objs["args"] and torch.equal(back["rng"], rng)
    assert np.array_equal(back["it"][0], objs["it"][0]) and back["cells"] == ["cell2", "cell0"]


def test_flat_range_fragments_reshard(root):
    """A [6, 5] tensor saved as 3 flat fragments (a distributed optimizer's
    buckets), loaded as row halves and as other fragments."""
    full = torch.arange(30, dtype=torch.float32).reshape(6, 5)
    flat = full.flatten()
    cuts = [0, 7, 19, 30]
    sd = {f"f{i}": ckpt.ShardedTensor.from_flat_range("p", flat[a:b].clone(), (6, 5), (0, 0), a, b)
          for i, (a, b) in enumerate(zip(cuts, cuts[1:]))}
    ckpt.save(sd, root, 1)
    top, bottom = torch.zeros(3, 5), torch.zeros(3, 5)
    ckpt.load({"t": ckpt.ShardedTensor.from_rank_offsets("p", top, (0, 0, 2)),
               "b": ckpt.ShardedTensor.from_rank_offsets("p", bottom, (0, 1, 2))}, root)
    assert torch.equal(torch.cat([top, bottom]), full)
    # MCore style: the flattened range of the second row-half box.
    frag = torch.zeros(9)
    ckpt.load({"f": ckpt.ShardedTensor.from_rank_offsets_flat("p", frag, (3, 5), (0, 1, 2),
                                                              flattened_range=slice(4, 13))}, root)
    assert torch.equal(frag, full[3:].flatten()[4:13])


def test_allow_shape_mismatch_padded_vocab(root):
    emb = torch.arange(40, dtype=torch.float32).reshape(10, 4)
    ckpt.save({"e": ckpt.ShardedTensor.from_rank_offsets("emb", emb, allow_shape_mismatch=True)}, root, 1)
    bigger = torch.full((12, 4), 7.0)  # padded to 12 rows at load
    ckpt.load({"e": ckpt.ShardedTensor.from_rank_offsets("emb", bigger, allow_shape_mismatch=True)}, root)
    assert torch.equal(bigger[:10], emb) and torch.all(bigger[10:] == 0)
    with pytest.raises(ckpt.CkptError):  # without the flag the shapes must agree
        ckpt.load({"e": ckpt.ShardedTensor.from_rank_offsets("emb", torch.zeros(12, 4))}, root)


def layers(n, fill):
    return {f"l{i}": ckpt.ShardedTensor.from_rank_offsets(f"layers.{i}.w", torch.full((2, 2), float(i) if fill else -1.0))
            for i in range(n)}


def test_strict_modes(root):
    ckpt.save(layers(4, True), root, 1)
    # 4-layer checkpoint as 2 layers: unexpected layers.2/3.
    assert ckpt.load(layers(2, False), root, strict="assume_ok_unexpected")["l1"][0, 0] == 1  # opted out by name
    for strict in ("raise_unexpected", None):  # None: the default (raise_all)
        with pytest.raises(ckpt.FailedPreconditionError) as e:
            ckpt.load(layers(2, False), root, **({"strict": strict} if strict else {}))
        assert "'layers.2.w'" in e.value.message and e.value.code == "FailedPrecondition"
    _, unexpected = ckpt.load(layers(2, False), root, strict="return_unexpected")
    assert unexpected == {"layers.2.w", "layers.3.w"}
    # ... as 6 layers: missing layers.4/5.
    with pytest.raises(ckpt.NotFoundError) as e:
        ckpt.load(layers(6, False), root)
    assert "layers.4.w" in e.value.message
    sd = layers(6, False)
    out, missing, unexpected = ckpt.load(sd, root, strict="return_all")
    assert missing == {"layers.4.w", "layers.5.w"} and not unexpected
    assert out["l3"][0, 0] == 3 and out["l5"][0, 0] == -1  # missing: left as it was
    with pytest.warns(UserWarning, match="layers.3.w"):
        ckpt.load(layers(3, False), root, strict="log_unexpected")
    with pytest.raises(ValueError):
        ckpt.load(layers(4, False), root, strict="bogus")


def test_async_save_snapshot_and_overwrite(root):
    w = torch.full((256, 256), 1.0)
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", w), "o": ckpt.ShardedObject("o", 1)}
    handles = []
    for it in (1, 2, 3):
        w.fill_(float(it))
        sd["o"].data = it
        handles.append(ckpt.async_save(sd, root, it))
        w.fill_(-1.0)  # the training step after the snapshot
    assert handles[-1].wait(timeout=60)["iteration"] == 3
    for h in handles:  # earlier saves were joined in order by the next async_save
        assert h.done()
    for it in (1, 2, 3):
        back = torch.zeros(256, 256)
        o = ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", back), "o": ckpt.ShardedObject("o", None)},
                      root, iteration=it)["o"]
        assert torch.all(back == it) and o == it
    assert handles[0].start_stats["snapshot_bytes"] == 256 * 256 * 4 + len(pickle.dumps(1, protocol=4))


def test_reserve_async_save_preallocates_and_the_arena_is_reused(root):
    w = torch.full((512, 256), 1.0)
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", w)}
    capacity = ckpt.reserve_async_save(sd)  # the process-local saver (comm=None)
    assert capacity >= 512 * 256 * 4
    h = ckpt.async_save(sd, root, 1)
    assert h.start_stats["allocate_seconds"] == 0  # reserved: the first save only copies
    w.fill_(-1.0)
    h.wait(timeout=60)
    small = {"v": ckpt.ShardedTensor.from_rank_offsets("v", torch.full((64,), 2.0))}
    h2 = ckpt.async_save(small, root, 2)  # smaller: the same arena
    assert h2.start_stats["allocate_seconds"] == 0
    h2.wait(timeout=60)
    assert ckpt.reserve_async_save(sd) == capacity  # as large already: nothing allocated
    back = torch.zeros(512, 256)
    ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", back)}, root, iteration=1)
    assert torch.all(back == 1.0)


def test_xxh3_chunk_hash_is_recorded_loaded_and_verified(root):
    src = pattern((300, 40), torch.float32)
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", src)}
    ckpt.save(sd, root, 1, chunk_hash="xxh3-128", chunk_bytes=4096)
    ckpt.save(sd, root, 2)
    assert ckpt.inspect(root, 1)["chunk_hash"] == "xxh3-128" and ckpt.inspect(root, 1)["format_version"] == 2
    assert ckpt.inspect(root, 2)["chunk_hash"] == "sha256" and ckpt.inspect(root, 2)["format_version"] == 2
    assert ckpt.verify(root, 1)["ok"]
    assert ckpt.fingerprint(root, 1)["digest"] == ckpt.fingerprint(root, 2)["digest"]
    back = torch.zeros_like(src)
    ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", back)}, root, iteration=1)
    assert torch.equal(back, src)
    with pytest.raises(ckpt.InvalidArgumentError, match="unknown chunk hash 'md5'"):
        ckpt.save(sd, root, 3, chunk_hash="md5")


def test_direct_io_load_reads_past_the_page_cache_or_says_why_not(root):
    src = pattern((300, 40), torch.float32)
    ckpt.save({"w": ckpt.ShardedTensor.from_rank_offsets("w", src)}, root, 1, chunk_bytes=8192)
    for direct in (True, False, "auto"):
        back, st = torch.zeros_like(src), {}
        ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", back)}, root, stats=st, direct_io=direct)
        assert torch.equal(back, src)
        if direct is True:  # a filesystem without O_DIRECT (tmpfs before Linux 6.6) reads buffered and says so
            assert st["direct_read_bytes"] >= st["bytes_read"] or "O_DIRECT" in st["direct_io_fallback"], st
        elif direct is False:
            assert st["direct_read_bytes"] == 0 and st["direct_io_fallback"] == "", st
        else:  # the loads above left the file in the page cache: auto reads it buffered
            assert st["files_cached"] >= 1 and st["direct_read_bytes"] == 0, st
    with pytest.raises(ValueError, match="direct_io='yes'"):
        ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", src)}, root, direct_io="yes")


def test_save_direct_io_default_and_buffered(root, monkeypatch):
    src = pattern((300, 400), torch.float32)  # 480 KB: chunks of 128 KiB, aligned when direct
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", src)}
    buffered = ckpt.save(sd, root, 1, chunk_bytes=128 << 10, direct_io=False)
    direct = ckpt.save(sd, root, 2, chunk_bytes=128 << 10, direct_io=True)
    assert not buffered["direct_io"] and buffered["direct_bytes"] == 0, buffered
    assert direct["direct_io"], direct  # tmpfs before Linux 6.6 falls back and says why
    assert direct["direct_bytes"] > 0 or "O_DIRECT" in direct["direct_io_fallback"], direct
    if "CKPT_DIRECT_IO" not in os.environ:
        assert ckpt.save(sd, root, 3, chunk_bytes=128 << 10)["direct_io"]  # the default
    for it in (1, 2):
        back = torch.zeros_like(src)
        ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", back)}, root, iteration=it)
        assert torch.equal(back, src)
    assert ckpt.fingerprint(root, 1)["digest"] == ckpt.fingerprint(root, 2)["digest"]
    done = ckpt.async_save(sd, root, 4, chunk_bytes=128 << 10, direct_io=False).wait(timeout=60)
    assert not done["direct_io"] and done["direct_bytes"] == 0, done
    done = ckpt.async_save(sd, root, 5, chunk_bytes=128 << 10, direct_io=True).wait(timeout=60)
    assert done["direct_io"] and (done["direct_bytes"] > 0 or "O_DIRECT" in done["direct_io_fallback"]), done


def test_async_save_failure_is_raised_and_nothing_published(root):
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", torch.ones(4))}
    ckpt.save(sd, root, 5)
    h = ckpt.async_save(sd, root, 5)  # iteration 5 exists: the background save fails
    with pytest.raises(ckpt.CkptError) as e:
        h.wait()
    assert isinstance(e.value, ckpt.AlreadyExistsError) and "exist" in e.value.message, e.value
    assert e.value.phase and e.value.rank == 0
    assert ckpt.inspect(root)["iteration"] == 5 and ckpt.verify(root)["ok"]


def test_read_helpers_and_bf16_numpy_interop(root):
    t = (torch.arange(12, dtype=torch.float32) / 3).to(torch.bfloat16).reshape(3, 4)
    bits = t.view(torch.int16).numpy().view(np.uint16)
    # numpy has no bf16: uint16 bit patterns with dtype="bf16".
    ckpt.save({"a": ckpt.ShardedTensor.from_rank_offsets("a", bits.copy(), dtype="bf16"),
               "b": ckpt.ShardedTensor.from_rank_offsets("b", t)}, root, 3, metadata={"gpt": None})
    ra, rb = ckpt.read_tensor(root, "a"), ckpt.read_tensor(root, "b", numpy=True)
    assert ra.dtype == torch.bfloat16 and torch.equal(ra, t)
    assert rb.dtype == np.uint16 and np.array_equal(rb, bits)
    assert np.array_equal(ckpt.bf16_to_float32(rb), t.float().numpy())
    assert np.array_equal(ckpt.float32_to_bf16(t.float().numpy()), bits)
    box = ckpt.read_tensor(root, "b", offset=(1, 1), shape=(2, 2))
    assert torch.equal(box, t[1:3, 1:3])
    m = ckpt.inspect(root)
    assert m["tensors"]["a"]["dtype"] == "bf16" and m["metadata"] == {"gpt": None}
    v = ckpt.verify(root)
    assert v["ok"] and v["chunks_checked"] >= 2
    assert len(ckpt.fingerprint(root)["digest"]) == 64
    with pytest.raises(ckpt.NotFoundError):
        ckpt.read_tensor(root, "nope")


def test_fingerprint_compares_by_value_with_timings_apart(root):
    src = pattern((300, 40), torch.float32)
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", src)}
    ckpt.save(sd, root, 1, chunk_bytes=4096)
    ckpt.save(sd, root, 2, chunk_bytes=8192, compress="zstd")  # same state, other chunks
    ckpt.save({"w": ckpt.ShardedTensor.from_rank_offsets("w", src + 1)}, root, 3)
    a, b, c = ckpt.fingerprint(root, 1), ckpt.fingerprint(root, 2), ckpt.fingerprint(root, 3)
    assert isinstance(a, ckpt.Fingerprint) and a == b and hash(a) == hash(b) and a != c and len({a, b, c}) == 2
    assert a == ckpt.fingerprint(root, 1)  # the same checkpoint twice (timings differ)
    assert a.iteration == 1 and b.iteration == 2 and set(a.stats) == {"bytes_hashed", "seconds"}
    assert a.stats["bytes_hashed"] == src.numel() * 4 and a["digest"] == a.digest and a["seconds"] >= 0
    assert a.tensors == b.tensors and a.tensors != c.tensors and a != a.digest


def test_manifest_layout_records_the_world_of_the_comm(root):
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", torch.ones(4))}
    ckpt.save(sd, root, 1)
    ckpt.save(sd, root, 2, layout={"tp": 1, "note": "mine"})
    ckpt.async_save(sd, root, 3).wait(timeout=60)
    assert ckpt.inspect(root, 1)["layout"] == {"world": 1}
    assert ckpt.inspect(root, 2)["layout"] == {"tp": 1, "note": "mine", "world": 1}
    assert ckpt.inspect(root, 3)["layout"] == {"world": 1}
    with pytest.raises(ckpt.InvalidArgumentError, match="world 4, but the comm has 1 rank"):
        ckpt.save(sd, root, 4, layout={"world": 4})
    with pytest.raises(ckpt.InvalidArgumentError, match="layout must be a dict"):
        ckpt.save(sd, root, 4, layout=[1, 2])


def test_convert_refuses_a_negative_shard_size_and_leaves_nothing(tmp_path):
    with pytest.raises(ckpt.InvalidArgumentError, match="max_shard_bytes"):
        ckpt.convert(tmp_path / "none", tmp_path / "hf", to="hf", max_shard_bytes=-1)
    with pytest.raises(ckpt.NotFoundError):
        ckpt.convert(tmp_path / "none", tmp_path / "out" / "hf", to="hf")
    assert not (tmp_path / "hf").exists() and not (tmp_path / "out").exists()


def test_errors_carry_code_rank_phase(tmp_path):
    with pytest.raises(ckpt.NotFoundError) as e:
        ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", torch.zeros(2))}, str(tmp_path / "none"))
    assert e.value.code == "NotFound" and e.value.rank == 0 and e.value.phase
    assert isinstance(e.value, ckpt.CkptError) and isinstance(e.value, LookupError)
    root = str(tmp_path / "c")
    ckpt.save({"w": ckpt.ShardedTensor.from_rank_offsets("w", torch.ones(64))}, root, 1)
    shard = [f for f in os.listdir(os.path.join(root, "iter_0000001")) if f.endswith(".h5")][0]
    path = os.path.join(root, "iter_0000001", shard)
    data = bytearray(open(path, "rb").read())
    at = bytes(data).find(np.ones(64, dtype=np.float32).tobytes())
    assert at > 0
    data[at + 100] ^= 1  # flip a bit in the tensor's stored chunk
    open(path, "wb").write(bytes(data))
    assert not ckpt.verify(root)["ok"]
    with pytest.raises(ckpt.CorruptionError) as e:
        ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", torch.zeros(64))}, root)
    assert shard in e.value.message and e.value.code == "Corruption"
    assert pickle.loads(pickle.dumps(e.value)).code == "Corruption"


def _training_state(step, w, m):
    return {"model": {"w": ckpt.ShardedTensor.from_rank_offsets("model.w", w)},
            "optim": {"exp_avg": ckpt.ShardedTensor.from_rank_offsets("optim.w.exp_avg", m)},
            "step": ckpt.ShardedObject("step", step), "rng": ckpt.ShardedObject("rng", [1, 2, 3])}


def test_naive_resume_of_parameters_only_raises_unless_opted_out(root):
    """Safe default (issue 29.2): a resume that asks only for the parameters
    used to succeed, leaving the Adam moments, RNG and step unrestored."""
    ckpt.save(_training_state(5, torch.ones(4), torch.full((4,), 2.0)), root, 5)
    w = torch.zeros(4)
    with pytest.raises(ckpt.FailedPreconditionError) as e:
        ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("model.w", w)}, root)
    assert "optim.w.exp_avg" in e.value.message and "'step'" in e.value.message, e.value
    st = {}
    out = ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("model.w", w)}, root, strict="assume_ok_unexpected",
                    stats=st)
    assert torch.all(out["w"] == 1) and st["iteration"] == 5 and st["requested_iteration"] is None
    assert st["unexpected_keys"] == ["optim.w.exp_avg", "rng", "step"] and st["missing_keys"] == [], st
    # A request with a key the checkpoint lacks: NotFoundError by default.
    more = _training_state(None, torch.zeros(4), torch.zeros(4))
    more["sched"] = ckpt.ShardedObject("sched", None)
    with pytest.raises(ckpt.NotFoundError, match="sched"):
        ckpt.load(more, root)
    back = ckpt.load(_training_state(None, torch.zeros(4), torch.zeros(4)), root)  # the full state: fine
    assert back["step"] == 5 and back["rng"] == [1, 2, 3] and torch.all(back["optim"]["exp_avg"] == 2)


@pytest.mark.parametrize("value, kind", [(5, "int"), (torch.ones(3), "Tensor"), (None, "NoneType"), ("x", "str")])
def test_save_refuses_a_value_it_cannot_save(root, value, kind):
    """Plain values in the state dict used to be passed over silently."""
    sd = _training_state(1, torch.ones(4), torch.ones(4))
    sd["optim"]["extra"] = [value]
    for save in (ckpt.save, ckpt.async_save):
        with pytest.raises(TypeError, match=rf"state\['optim'\]\['extra'\]\[0\] is a {kind}, not a ckpt"):
            save(sd, root, 1)
    assert not os.path.exists(root)  # nothing written


def test_fallback_load_warns_and_says_which_iteration_and_why(root):
    for it in (9, 12):
        ckpt.save({"w": ckpt.ShardedTensor.from_rank_offsets("w", torch.full((64,), float(it)))}, root, it)
    d12 = os.path.join(root, "iter_0000012")
    shard = [f for f in os.listdir(d12) if f.endswith(".h5")][0]
    with open(os.path.join(d12, shard), "r+b") as f:
        f.truncate(100)  # iteration 12 damaged
    back, st = torch.zeros(64), {}
    with pytest.warns(ckpt.FallbackWarning, match=r"asked for the latest iteration, fell back to iteration 9; "
                                                  r"passed over: .*iter_0000012") as w:
        ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", back)}, root, fallback=True, stats=st)
    assert len(w) == 1 and torch.all(back == 9) and st["iteration"] == 9, st
    assert any("iter_0000012" in why for why in st["skipped"]), st
    with pytest.raises(ckpt.CkptError):  # no fallback: the damage raises
        ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", back)}, root)


def test_save_failures_raise_one_class_per_cause_in_python_terms(root, tmp_path):
    """Every save failure used to raise AbortedError (issue 29.6)."""
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", torch.ones(4))}
    ckpt.save(sd, root, 5)
    with pytest.raises(ckpt.FailedPreconditionError) as e:
        ckpt.save(sd, root, 3)
    assert e.value.code == "FailedPrecondition" and "allow_older=True" in e.value.message, e.value
    assert "--allow-older" not in str(e.value) and "Aborted" not in str(e.value), e.value
    ckpt.save(sd, root, 3, allow_older=True)
    with pytest.raises(ckpt.AlreadyExistsError, match="iteration 5 already exists"):
        ckpt.save(sd, root, 5)
    with pytest.raises(ckpt.InvalidArgumentError, match="both hold its main replica"):
        ckpt.save({"a": sd["w"], "b": sd["w"]}, root, 7)
    with pytest.raises(ckpt.AlreadyExistsError, match="not a directory"):
        ckpt.save(sd, os.path.join(root, "iter_0000005", "manifest.json"), 1)
    # A root that is an iteration directory or a file: the message says what to pass instead.
    with pytest.raises(ckpt.NotFoundError, match=r"is an iteration directory: pass its parent '.*ck' as the root"):
        ckpt.load(sd, os.path.join(root, "iter_0000005") + "/")
    with pytest.raises(ckpt.NotFoundError, match=r"is a file: the root is the directory holding"):
        ckpt.load(sd, os.path.join(root, "iter_0000005", "manifest.json"), iteration=5)
    with pytest.raises(ckpt.NotFoundError, match="does not exist"):
        ckpt.load(sd, str(tmp_path / "nowhere"))


def test_aborted_relays_map_to_the_typed_cause_not_the_text():
    """The class follows the cause code the library passes (Status::cause()),
    never a "<Code>: " prefix in the message (which used to be parsed)."""
    from ckpt._errors import make_error
    e = make_error("Aborted", "rank 1 failed: no file 'x'", 0, "save", 2, "plan", "NotFound")
    assert type(e) is ckpt.NotFoundError and e.code == "NotFound" and e.status_code == "Aborted" and e.rank == 2
    assert e.message == "rank 1 failed: no file 'x'"
    e = make_error("Aborted", "rank 1 failed: NotFound: looks like a code", 0, "save", 1, "vote", "Aborted")
    assert type(e) is ckpt.AbortedError, e  # the text is not a decision
    e = make_error("Aborted", "load of iter_0000002 failed on rank 1: late", 0, "load", 1, "load", "Timeout")
    assert type(e) is ckpt.CkptTimeoutError and isinstance(e, TimeoutError)
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is ckpt.CkptTimeoutError and again.status_code == "Aborted" and again.rank == 1


def test_descriptor_errors():
    with pytest.raises(ValueError):
        ckpt.ShardedTensor.from_rank_offsets("x", torch.zeros(4), (0, 2, 2))
    with pytest.raises(ValueError):
        ckpt.ShardedTensor.from_flat_range("x", torch.zeros(4), (10,), (0,), 0, 5)
    with pytest.raises(TypeError):
        ckpt.ShardedTensor.from_rank_offsets("x", torch.zeros(2, dtype=torch.complex64))


def test_store_broadcast_root_never_waits_on_a_reader():
    """TorchComm's store collectives, threads as ranks over a HashStore: a
    broadcast root returns at once even if a reader never comes (it used to
    wait for every reader and fail "message not taken by rank(s) 2" while the
    ranks that took the message went on: survivors disagreed), and its keys
    are gone once every reader took it."""
    import threading
    import time
    import torch.distributed as dist
    from ckpt._comm import _StoreComm
    store = dist.HashStore()
    comms = [_StoreComm(r, 3, store, "t") for r in range(3)]
    got = {}
    t0 = time.monotonic()
    got[0] = comms[0].broadcast(b"decision", 0, 2.0, "commit")  # rank 2 is dead
    root_s = time.monotonic() - t0
    got[1] = comms[1].broadcast(b"", 0, 2.0, "commit")
    assert got == {0: b"decision", 1: b"decision"} and root_s < 1.0, (got, root_s)
    # Every reader takes the next one: its message and counters are deleted.
    comms[2]._seq = comms[0]._seq  # rank 2 "skips" the first (it died before it)
    readers = [threading.Thread(target=lambda r=r: got.__setitem__(r, comms[r].broadcast(b"", 0, 2.0, "x")))
               for r in (1, 2)]
    comms[0].broadcast(b"second", 0, 2.0, "x")
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    assert got[1] == got[2] == b"second"
    from ckpt._comm import _tidy_broadcasts
    _tidy_broadcasts(comms[0])
    # Left: only the first broadcast's keys (its reader is dead, it expires later).
    assert store.num_keys() == 4, store.num_keys()


def test_errors_never_say_rank_minus_one(root):
    """A bad save option fails naming this process's rank (it said "rank -1");
    an error whose rank is unknown names none."""
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", torch.zeros(3))}
    for kw in ({"compress": "lz4"}, {"chunk_hash": "md5"}):
        with pytest.raises(ckpt.InvalidArgumentError) as e:
            ckpt.save(sd, root, 1, **kw)
        assert e.value.rank == 0 and "rank -1" not in str(e.value), str(e.value)
    assert str(ckpt.CkptError("unknown origin")) == "Internal: unknown origin"


def test_timeouts_are_checked_as_numbers(root):
    """Issue 28 item 6: inf, NaN, 0, negative and > 7 days are refused at once
    with the accepted range (before: inf failed "within -9223372036854775808 ms",
    0 was taken); the async save checks the same way."""
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", torch.ones(8))}
    for bad in (float("inf"), float("nan"), 0, 0.0004, -1.0, 1e9):
        with pytest.raises(ckpt.InvalidArgumentError) as e:
            ckpt.save(sd, root, 1, timeout=bad)
        assert "1 .. 604800000 ms" in e.value.message and len(e.value.message) < 300, e.value.message
        assert "9223372036854775808" not in e.value.message
        with pytest.raises(ckpt.InvalidArgumentError):
            ckpt.load(sd, root, timeout=bad)
    assert "no deadline is not allowed" in str(pytest.raises(ckpt.InvalidArgumentError, ckpt.save, sd, root, 1,
                                                             timeout=float("inf")).value)
    with pytest.raises(ckpt.InvalidArgumentError):
        ckpt.async_save(sd, root, 1, timeout=float("inf")).wait(timeout=60)
    assert ckpt.save(sd, root, 1, timeout=0.5)["iteration"] == 1
    assert issubclass(ckpt.OutcomeUnknownError, ckpt.CkptError) and ckpt.OutcomeUnknownError.code == "OutcomeUnknown"


def test_store_comm_timeout_names_missing_ranks_and_hosts(root):
    """Issue 31: TorchComm's deadline failures carry the missing ranks and their hosts as
    fields (each rank registers its hostname in the store), and the C++ side maps them to
    the typed MissingPeers an MpiComm timeout carries: a save whose rank 1 never comes fails
    with missing_ranks [1] and missing_hosts ['n9'] (before: no host, no fields)."""
    import torch.distributed as dist
    from ckpt import _ckpt
    from ckpt._comm import _StoreComm
    store = dist.HashStore()
    comm = _StoreComm(0, 2, store, "t")
    comm.register_host()
    store.set("t/host/1", "n9")  # rank 1 "on host n9" registered (as register_host does), then lost
    store.add("t/host/1/r", 1)
    with pytest.raises(ckpt.CkptTimeoutError) as e:
        comm.gather(b"x", 0, 0.2, "vote")
    assert (e.value.missing_ranks, e.value.missing_hosts, e.value.missing_phase) == ([1], ["n9"], "vote")
    assert "rank 1 on host 'n9'" in str(e.value), str(e.value)
    comm._handle = _ckpt.callback_comm(comm)  # as TorchComm: ckpt's protocol over the store
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", torch.zeros(4))}
    with pytest.raises(ckpt.CkptTimeoutError) as e:
        ckpt.save(sd, root, 1, comm=comm, timeout=0.3)
    assert e.value.missing_ranks == [1] and e.value.missing_hosts == ["n9"] and e.value.missing_phase, \
        (e.value.missing_ranks, e.value.missing_hosts, e.value.missing_phase, str(e.value))
