"""The torch bridge (ckpt.TorchState) and the resume helpers (list_iterations,
latest, CheckpointManager). The acceptance test runs README.md's
"torch-quickstart" block as it stands: a DP=2 job (mp.spawn + gloo) that is
SIGKILLed mid-run and resumed must end bitwise equal to an uninterrupted run."""
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

import ckpt

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def quickstart():
    m = re.search(r"<!-- example: torch-quickstart -->\n```python\n(.*?)```", open(README).read(), re.S)
    assert m, "README has no '<!-- example: torch-quickstart -->' python block"
    return m.group(1)


def ckpt_lines(code):
    """Lines of ckpt code: those naming ckpt or the manager it returns."""
    return [ln for ln in code.splitlines() if re.search(r"\bckpt\b|\bmgr\b", ln)]


def run_job(script, root, steps, port, wait=True):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), OMP_NUM_THREADS="1")
    p = subprocess.Popen([sys.executable, str(script), str(root), str(steps)], env=env,
                         start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if wait:
        out, _ = p.communicate(timeout=240)
        assert p.returncode == 0, out
    return p


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_readme_quickstart_dp2_sigkill_resumes_bitwise(tmp_path):
    code = quickstart()
    lines = ckpt_lines(code)
    assert len(lines) <= 10, lines
    script = tmp_path / "train.py"
    script.write_text(code)
    steps = 200
    run_job(script, tmp_path / "ref", steps, free_port())
    # The same job SIGKILLed (the spawn parent and both ranks) once it has saved step 50.
    root = tmp_path / "killed"
    p = run_job(script, root, steps, free_port(), wait=False)
    deadline = time.monotonic() + 180
    while (ckpt.latest(root) or 0) < 50 and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    killed_at = ckpt.latest(root)
    assert killed_at is not None and killed_at < steps, f"not killed mid-run (latest {killed_at})"
    run_job(script, root, steps, free_port())  # resumes from the newest checkpoint
    assert ckpt.latest(root) == steps
    # Bitwise: every tensor and object digest (the data each step drew came from the restored RNG).
    got, want = ckpt.fingerprint(root, steps), ckpt.fingerprint(tmp_path / "ref", steps)
    assert (got["digest"], got["tensors"], got["objects"]) == (want["digest"], want["tensors"], want["objects"])
    assert ckpt.list_iterations(root) == [steps - 5, steps]  # keep_last=2
    info = ckpt.inspect(root)
    # DP=2, no TP rule: each tensor written once (one shard), by rank 0.
    assert all(t["shards"] == 1 for t in info["tensors"].values())
    assert "optimizer.state.exp_avg.0.weight" in info["tensors"] and "extra.step" in info["objects"]


def model_and_opt(kind="adamw", seed=0):
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 2))
    o = (torch.optim.AdamW(m.parameters(), lr=1e-2, weight_decay=0.1) if kind == "adamw"
         else torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9))
    return m, o


def train(m, o, n):
    for _ in range(n):
        o.zero_grad()
        m(torch.randn(5, 4)).pow(2).sum().backward()
        o.step()


def assert_same(m1, o1, m2, o2):
    for (k, a), b in zip(m1.state_dict().items(), m2.state_dict().values()):
        assert torch.equal(a, b), k
    s1, s2 = o1.state_dict(), o2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    assert s1["state"].keys() == s2["state"].keys()
    for i in s1["state"]:
        for k, v in s1["state"][i].items():
            assert torch.equal(v, s2["state"][i][k]) if torch.is_tensor(v) else v == s2["state"][i][k]


@pytest.mark.parametrize("kind", ["adamw", "sgd"])
def test_round_trip_fresh_optimizer_values_and_rng(tmp_path, kind):
    m, o = model_and_opt(kind)
    train(m, o, 3)
    o.param_groups[0]["lr"] = 5e-3  # a scheduler's change is state too
    extra = {"step": 3, "history": [1.0, 2.0], "ids": torch.arange(4)}
    ckpt.save_state(ckpt.TorchState(m, o, extra=extra), tmp_path, 3)
    want = (torch.rand(3), np.random.rand(), random.random())
    m2, o2 = model_and_opt(kind, seed=1)  # other values, optimizer state not created yet
    torch.manual_seed(7)
    extra2 = {"step": 0, "history": None, "ids": torch.zeros(4, dtype=torch.int64)}
    assert ckpt.load_state(ckpt.TorchState(m2, o2, extra=extra2), tmp_path) == 3
    assert_same(m, o, m2, o2)
    assert extra2["step"] == 3 and extra2["history"] == [1.0, 2.0] and torch.equal(extra2["ids"], torch.arange(4))
    got = (torch.rand(3), np.random.rand(), random.random())  # the RNG states were restored
    assert torch.equal(got[0], want[0]) and got[1:] == want[1:]
    rng = ckpt.torch_bridge.rng_state()
    train(m, o, 2)
    ckpt.torch_bridge.set_rng_state(rng)
    train(m2, o2, 2)  # same batches: training goes on bitwise
    assert_same(m, o, m2, o2)


def test_param_without_grad_keeps_no_state(tmp_path):
    m, o = model_and_opt()
    m[2].weight.requires_grad_(False)
    train(m, o, 2)
    m[2].weight.requires_grad_(True)
    ckpt.save_state(ckpt.TorchState(m, o, rng=False), tmp_path, 2)
    m2, o2 = model_and_opt(seed=1)
    ckpt.load_state(ckpt.TorchState(m2, o2, rng=False), tmp_path)
    assert_same(m, o, m2, o2)
    assert m2[2].weight not in o2.state


def test_partial_request_raises(tmp_path):
    """The naive resume that asks for the parameters only does not pass silently."""
    m, o = model_and_opt()
    train(m, o, 1)
    ckpt.save_state(ckpt.TorchState(m, o, extra={"step": 1}), tmp_path, 1)
    with pytest.raises(ckpt.CkptError, match="optimizer"):
        ckpt.load_state(ckpt.TorchState(m), tmp_path)


@pytest.mark.parametrize("async_save", [False, True])
def test_manager_every_retention_and_fallback(tmp_path, async_save):
    m, o = model_and_opt()
    extra = {"step": 0}
    mgr = ckpt.CheckpointManager(tmp_path, ckpt.TorchState(m, o, extra=extra), save_every=2, keep_last=2,
                                 keep_every=4, async_save=async_save, preemption_signals=())
    assert mgr.restore() is None and ckpt.latest(tmp_path) is None and ckpt.list_iterations(tmp_path) == []
    for step in range(1, 11):
        train(m, o, 1)
        extra["step"] = step
        assert mgr.save(step) == (step % 2 == 0)
    mgr.close()
    assert ckpt.list_iterations(tmp_path) == [4, 8, 10]
    # Lose the newest one's shard file: restore falls back to 8.
    next(p for p in (tmp_path / "iter_0000010").iterdir() if p.suffix == ".h5").unlink()
    m2, o2 = model_and_opt(seed=1)
    extra2 = {"step": 0}
    mgr2 = ckpt.CheckpointManager(tmp_path, ckpt.TorchState(m2, o2, extra=extra2), preemption_signals=())
    assert mgr2.restore() == 8 and extra2["step"] == 8


def test_manager_saves_and_exits_on_sigterm(tmp_path):
    m, o = model_and_opt()
    extra = {"step": 0}
    mgr = ckpt.CheckpointManager(tmp_path, ckpt.TorchState(m, o, extra=extra), save_every=100)
    with pytest.raises(SystemExit):
        for step in range(1, 50):
            train(m, o, 1)
            extra["step"] = step
            if step == 7:
                os.kill(os.getpid(), signal.SIGTERM)
            mgr.save(step)
    assert ckpt.latest(tmp_path) == 7
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def test_tensor_parallel_rules_and_megatron_attributes():
    lin = torch.nn.Linear(6, 4, bias=False)  # this rank's [4, 6] half of [8, 6]
    row = torch.nn.Linear(4, 3, bias=False)
    norm = torch.nn.LayerNorm(3)
    model = torch.nn.ModuleDict({"col": lin, "row": row, "norm": norm})
    ckpt.mark_tensor_parallel(row, axis=1)
    tp = ckpt.TensorParallel(1, 2, dp_rank=1, rules={"col.*": 0})
    sd = ckpt.TorchState(model, tp=tp, rng=False).sharded_state_dict()
    (col,), (r,), (nw,) = sd["col.weight"], sd["row.weight"], sd["norm.weight"]
    assert (col.global_shape, col.global_offset, col.replica_id) == ((8, 6), (4, 0), (0, 1))
    assert (r.global_shape, r.global_offset) == ((3, 8), (0, 4))
    assert (nw.global_shape, nw.replica_id) == ((3,), (1, 1))  # TP-replicated: TP rank 1 is no main replica
    assert col.data.data_ptr() == lin.weight.data_ptr()  # zero copy


def test_from_megatron_duck_typed():
    class MT:  # the fields of megatron.core.dist_checkpointing.ShardedTensor
        def __init__(self, **kw):
            self.__dict__.update(kw)
    t = torch.zeros(2, 3)
    sd = {"a": MT(key="w", data=t, dtype=t.dtype, local_shape=(2, 3), global_shape=(4, 2, 3),
                  global_offset=(1, 0, 0), replica_id=(0, 0, 0), prepend_axis_num=1,
                  allow_shape_mismatch=False, flattened_range=None)}
    out = ckpt.from_megatron(sd)["a"]
    assert isinstance(out, ckpt.ShardedTensor)
    assert (out.global_shape, out.global_offset, out.local_shape) == ((4, 2, 3), (1, 0, 0), (1, 2, 3))


def test_tp2_saved_loads_at_tp1(tmp_path):
    """Both TP ranks' shards saved by one process, loaded whole at TP1 in place."""
    torch.manual_seed(0)
    full = {"col.weight": torch.randn(8, 6), "row.weight": torch.randn(3, 8), "norm.weight": torch.randn(3)}

    def net(tp_rank, tp_size):
        m = torch.nn.ModuleDict({"col": torch.nn.Linear(6, 8 // tp_size, bias=False),
                                 "row": torch.nn.Linear(8 // tp_size, 3, bias=False),
                                 "norm": torch.nn.LayerNorm(3, elementwise_affine=True)})
        with torch.no_grad():
            m["col"].weight.copy_(full["col.weight"].chunk(tp_size, 0)[tp_rank])
            m["row"].weight.copy_(full["row.weight"].chunk(tp_size, 1)[tp_rank])
            m["norm"].weight.copy_(full["norm.weight"])
        return m
    rules = {"col.*": 0, "row.*": 1}
    sd = {}
    for r in range(2):
        st = ckpt.TorchState(net(r, 2), tp=ckpt.TensorParallel(r, 2, rules=rules), rng=False)
        sd.update({f"{k}@{r}": d for k, d in ckpt.torch_bridge.flat_state(st.sharded_state_dict()).items()})
    ckpt.save(sd, tmp_path, 1)
    m1 = torch.nn.ModuleDict({"col": torch.nn.Linear(6, 8, bias=False), "row": torch.nn.Linear(8, 3, bias=False),
                              "norm": torch.nn.LayerNorm(3)})
    ckpt.load_state(ckpt.TorchState(m1, tp=ckpt.TensorParallel(0, 1, rules=rules), rng=False), tmp_path)
    for k, v in full.items():
        assert torch.equal(m1.state_dict()[k], v), k


class _Comm:  # rank/size only: TorchState's view of a comm (the descriptors of one rank)
    def __init__(self, rank, size):
        self.rank, self.size = rank, size


def test_load_at_another_world_size_restores_all_but_the_rng_with_a_warning(tmp_path):
    """Saved by 2 ranks (both ranks' descriptors in one process), loaded by 1:
    at world 1 the model, optimizer and extra load and the RNG is left as it is
    with an RngNotRestoredWarning naming why (at the same world size the RNG
    loads: test_round_trip_fresh_optimizer_values_and_rng); any other key
    difference still raises."""
    torch.manual_seed(3)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    sd = {}
    for r in range(2):
        st = ckpt.TorchState(model, opt, extra={"step": 7}, comm=_Comm(r, 2))
        sd.update({f"{k}@{r}": d for k, d in ckpt.torch_bridge.flat_state(st.sharded_state_dict()).items()})
    saved_rng = ckpt.torch_bridge.rng_state()["torch"].clone()
    ckpt.save(sd, tmp_path, 1)

    m1, extra = torch.nn.Linear(4, 3), {"step": 0}
    o1 = torch.optim.AdamW(m1.parameters(), lr=0.1)
    torch.manual_seed(99)
    mine = torch.get_rng_state().clone()
    with pytest.warns(ckpt.RngNotRestoredWarning, match="saved by 2 ranks, this job has 1"):
        assert ckpt.load_state(ckpt.TorchState(m1, o1, extra=extra), tmp_path) == 1
    assert torch.equal(torch.get_rng_state(), mine)  # left as it was
    assert extra == {"step": 7} and torch.equal(m1.weight, model.weight)
    assert torch.equal(o1.state[m1.weight]["exp_avg"], opt.state[model.weight]["exp_avg"])
    # Other differences still raise: a model with an extra parameter.
    m3 = torch.nn.Sequential(torch.nn.Linear(4, 3))
    with pytest.warns(ckpt.RngNotRestoredWarning), pytest.raises(ckpt.CkptError):
        ckpt.load_state(ckpt.TorchState(m3), tmp_path)
    assert tuple(ckpt.inspect(tmp_path)["objects"]["rng"]["grid"]) == (2,) and not torch.equal(saved_rng, mine)
