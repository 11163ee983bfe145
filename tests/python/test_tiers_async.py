"""ckpt.TieredCheckpointer's local save blocks only for a host snapshot (issue 33): in one
process (comm=None, no replicas), the write, the local commit and the global drain run in the
background, the state changed right after save() returns reaches neither tier, and a failure in
the background is raised, typed (rank, phase), at the next join. bench/py_tiers.py measures the
blocked time against one memcpy of the same bytes."""
import os

import pytest
import torch

import ckpt


def state(it, n=1 << 20):
    """~9 MB in four tensors (fp32, bf16, int64) and an object; values depend on `it`."""
    g = torch.Generator().manual_seed(it)
    t = {"w": torch.randn(n, generator=g), "b": torch.randn(n // 4, generator=g).to(torch.bfloat16),
         "m": torch.randn(n, generator=g), "step": torch.arange(8, dtype=torch.int64) + it}
    sd = {k: ckpt.ShardedTensor.from_rank_offsets(k, v) for k, v in t.items()}
    sd["args"] = ckpt.ShardedObject("args", {"it": it})
    return sd, t


def tiers(d, **kw):
    return ckpt.TieredCheckpointer(os.path.join(d, "global"), os.path.join(d, "local"), local_every=1,
                                   global_every=2, replicas=0, **kw)


def test_state_changed_after_save_returns_reaches_neither_tier(tmp_path):
    d = str(tmp_path)
    tc = tiers(d)
    sd2, live2 = state(2)
    want2 = {k: v.clone() for k, v in live2.items()}
    out = tc.save(sd2, 2)  # local 2 and global 2, both in the background
    for v in live2.values():  # training goes on at once
        v.fill_(7)
    assert out["local"]["mode"] == "background" and out["global"] == {"iteration": 2, "mode": "background"}, out
    tensor_bytes = sum(v.numel() * v.element_size() for v in want2.values())
    assert tensor_bytes < out["local"]["snapshot_bytes"] < tensor_bytes + 1000, out  # + the pickled object
    sd3, live3 = state(3)
    want3 = {k: v.clone() for k, v in live3.items()}
    out = tc.save(sd3, 3)  # joins 2 first
    for v in live3.values():
        v.fill_(9)
    joined = out["joined"]
    assert joined["iteration"] == 2 and joined["global"]["drained_from"].endswith("rank_0"), joined
    # The save blocked for the snapshot only: far less than the write + commit + drain behind it.
    assert out["local"]["snapshot_seconds"] < joined["background_seconds"], (out, joined)
    assert tc.wait()["iteration"] == 3 and tc.wait() is None

    got, _ = state(0)
    ckpt.load(got, os.path.join(d, "global"), iteration=2)
    for k, v in want2.items():
        assert torch.equal(got[k].data, v), f"global 2: {k} differs from the state at save time"
    got, live = state(0)
    loaded, choice = tc.resume(got)
    assert (choice["tier"], choice["iteration"]) == ("local", 3), choice
    for k, v in want3.items():
        assert torch.equal(live[k], v), f"local 3: {k} differs from the state at save time"
    assert loaded["args"] == {"it": 3}


def test_background_failure_is_raised_typed_at_the_next_join(tmp_path):
    d = str(tmp_path)
    tc = tiers(d)
    tc.save(state(1)[0], 1)
    assert tc.wait()["global"] is None
    with open(os.path.join(d, "global"), "w"):  # the global root cannot be made: the drain of 2 fails
        pass
    out = tc.save(state(2)[0], 2)  # returns: the failure is in the background
    assert out["global"]["mode"] == "background"
    with pytest.raises(ckpt.CkptError) as e:
        tc.save(state(3)[0], 3)  # joins 2: its error, and 3 is not started
    assert e.value.rank == 0 and e.value.phase == "begin", e.value
    assert "background global drain of iteration 2" in e.value.message, e.value
    assert tc.wait() is None  # nothing in flight: 3 never started
    assert ckpt.list_iterations(os.path.join(d, "local", "rank_0")) == [2]  # 2 committed locally before its drain

    os.remove(os.path.join(d, "global"))
    local = os.path.join(d, "local", "rank_0")
    os.rename(local, local + ".moved")
    with open(local, "w"):  # this rank's local root cannot be made: the local write of 4 fails
        pass
    tc.save(state(4)[0], 4)
    with pytest.raises(ckpt.CkptError) as e:
        tc.wait()
    # typed: the rank, and the phase of the step that failed (the local write's save, at 'begin')
    assert e.value.rank == 0 and e.value.phase == "begin", e.value
    assert "background local save of iteration 4" in e.value.message and "'local_write'" in e.value.message, e.value
    os.remove(local)
    os.rename(local + ".moved", local)
    tc.save(state(5)[0], 5)
    tc.close()  # the saver works again after a failed save
    got, live = state(0)
    _, choice = tc.resume(got)
    assert (choice["tier"], choice["iteration"]) == ("local", 5), choice
    assert torch.equal(live["step"], state(5)[1]["step"])
