"""Multi-rank scenarios of the ckpt Python API, one process per rank.

Launched by test_multirank.py two ways:
  mpirun -np 4 python3 mp_worker.py mpi <scenario> <dir>           comm = ckpt.MpiComm()
  torch.multiprocessing (spawn), RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set as
  torchrun would, gloo process group, comm = ckpt.TorchComm()      (run(...) below)
Each rank writes <dir>/result.<scenario>.<rank>.json ({"ok": true, ...} or the
failure); assertions failing on a rank make it exit non-zero.
"""
import json
import os
import signal
import sys
import time
import traceback

import torch

import ckpt

WORLD = 4
ROWS, COLS, HID = 16, 8, 12  # column-parallel [ROWS, COLS], row-parallel [COLS, HID]


def expected(key, shape, base):
    n = 1
    for d in shape:
        n *= d
    return (torch.arange(n, dtype=torch.float64) * 0.5 + base + sum(map(ord, key)) % 7).reshape(shape)


def state(tp, tp_rank, dp_rank, fill, it=0):
    """A TP-sharded model: fc1 (rows split), fc2 (cols split), a TP/DP-replicated
    norm (bf16), an int step counter, a per-TP-rank RNG object and an args object."""
    fc1 = expected("fc1", (ROWS, COLS), it).to(torch.float32)
    fc2 = expected("fc2", (COLS, HID), it).to(torch.float16)
    norm = expected("norm", (HID,), it).to(torch.bfloat16)
    step = torch.arange(5, dtype=torch.int64) + it
    r, c = ROWS // tp, HID // tp
    mine = {"fc1": fc1[tp_rank * r:(tp_rank + 1) * r].clone(), "fc2": fc2[:, tp_rank * c:(tp_rank + 1) * c].clone(),
            "norm": norm.clone(), "step": step.clone()}
    if not fill:
        mine = {k: torch.zeros_like(v) for k, v in mine.items()}
    sd = {
        "layer": {
            "fc1": ckpt.ShardedTensor.from_rank_offsets("fc1", mine["fc1"], (0, tp_rank, tp), replica_id=(0, dp_rank)),
            "fc2": ckpt.ShardedTensor.from_rank_offsets("fc2", mine["fc2"], (1, tp_rank, tp), replica_id=(0, dp_rank)),
            "norm": ckpt.ShardedTensor.from_rank_offsets("norm", mine["norm"], replica_id=(tp_rank, dp_rank)),
        },
        "step": ckpt.ShardedTensor.from_rank_offsets("step", mine["step"], replica_id=tp_rank * 100 + dp_rank),
        "rng": ckpt.ShardedObject("rng", {"tp_rank": tp_rank, "it": it} if fill else None, (tp,), (tp_rank,),
                                  replica_id=dp_rank),
        "args": ckpt.ShardedObject("args", {"tp": tp, "it": it} if fill else None, replica_id=tp_rank + dp_rank),
    }
    want = {"fc1": fc1[tp_rank * r:(tp_rank + 1) * r], "fc2": fc2[:, tp_rank * c:(tp_rank + 1) * c],
            "norm": norm, "step": step}
    return sd, mine, want


def check(mine, want, what):
    for k in want:
        assert mine[k].dtype == want[k].dtype, (what, k)
        assert torch.equal(mine[k], want[k]), f"{what}: tensor {k} differs"


def tp_save_load(comm, rank, d):
    """Save at TP4, load at TP2 (x DP2) and TP1 (x DP4) in place; every value checked."""
    sd, _, _ = state(WORLD, rank, 0, True, it=7)
    st = ckpt.save(sd, d, 7, comm=comm, metadata={"note": "tp4"}, layout={"tp": WORLD})
    out = {"saved_bytes": st["bytes_written"]}
    for tp in (2, 1):
        tp_rank, dp_rank = rank % tp, rank // tp
        sd, mine, want = state(tp, tp_rank, dp_rank, False, it=7)
        loaded = ckpt.load(sd, d, comm=comm, strict="raise_unexpected" if tp == 2 else "raise_all",
                           stats=(stats := {}))
        check(mine, want, f"TP{tp}")
        assert loaded["layer"]["fc1"] is mine["fc1"], "load must return the caller's tensor"
        assert loaded["args"] == {"tp": WORLD, "it": 7}, loaded["args"]
        # The RNG grid was (4,) at save; a TP2/TP1 job reads the cells of its own TP ranks.
        assert loaded["rng"] == {"tp_rank": tp_rank, "it": 7}, loaded["rng"]
        out[f"tp{tp}_elements"] = stats["elements"]
    return out


def dead_rank(comm, rank, d, how, victim=2):
    """Iteration 1 commits; in iteration 2 rank `victim` dies (kill) or hangs
    past the deadline before its plan: the others fail naming it; nothing is
    committed."""
    sd, _, _ = state(WORLD, rank, 0, True, it=1)
    ckpt.save(sd, d, 1, comm=comm, timeout=10)
    if rank == victim:
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(9)  # hang: past the others' deadline
        return {"hung": True}
    t0 = time.monotonic()
    try:
        ckpt.save(sd, d, 2, comm=comm, timeout=4)
    except ckpt.CkptError as e:
        return {"code": e.code, "rank": e.rank, "phase": e.phase, "message": e.message,
                "seconds": time.monotonic() - t0}
    raise AssertionError("save with a dead rank succeeded")


def async_loop(comm, rank, d):
    """Three async saves; after each, the loop overwrites the tensors at once
    (training goes on). Saved values must be those at snapshot time."""
    sd, mine, _ = state(WORLD, rank, 0, True, it=0)
    blocking = []
    for it in (1, 2, 3):
        for k, v in state(WORLD, rank, 0, True, it=it)[1].items():
            mine[k].copy_(v)
        sd["rng"].data = {"tp_rank": rank, "it": it}
        sd["args"].data = {"tp": WORLD, "it": it}
        h = ckpt.async_save(sd, d, it, comm=comm)
        blocking.append(h.start_stats["blocking_seconds"])
        for v in mine.values():
            v.fill_(-99)  # the next step's update, racing the background save
    stats = h.wait(timeout=60)
    assert stats["iteration"] == 3 and h.done()
    for it in (1, 2, 3):
        sd2, mine2, want = state(WORLD, rank, 0, False, it=it)
        loaded = ckpt.load(sd2, d, iteration=it, comm=comm)
        check(mine2, want, f"async iteration {it}")
        assert loaded["rng"] == {"tp_rank": rank, "it": it}
    return {"blocking_seconds": blocking}


def errors(comm, rank, d):
    """Rank 1 asks for a key the checkpoint lacks: it raises NotFound naming it,
    every other rank an error naming rank 1; nothing hangs."""
    sd, _, _ = state(WORLD, rank, 0, True, it=1)
    ckpt.save(sd, d, 1, comm=comm)
    sd, _, _ = state(WORLD, rank, 0, False, it=1)
    if rank == 1:
        sd["extra"] = ckpt.ShardedTensor.from_rank_offsets("not.saved", torch.zeros(3))
    try:
        ckpt.load(sd, d, comm=comm, timeout=10)
    except ckpt.CkptError as e:
        return {"code": e.code, "rank": e.rank, "phase": e.phase, "message": e.message, "type": type(e).__name__}
    raise AssertionError("load of a missing key succeeded")


def dies_before_last_decision(comm, rank, d):
    """A load whose last collective (the 'strict' agreement) loses rank 2 after
    its gather message, before it takes rank 0's decision: rank 0 and the
    ranks that took the decision must agree on the outcome (here: loaded)."""
    sd, _, _ = state(WORLD, rank, 0, True, it=1)
    ckpt.save(sd, d, 1, comm=comm, timeout=10)
    if rank == 2:
        def dying_broadcast(msg, root, timeout, phase, _real=comm.broadcast):
            if phase == "strict":
                os.kill(os.getpid(), signal.SIGKILL)
            return _real(msg, root, timeout, phase)
        comm.broadcast = dying_broadcast
    sd, mine, want = state(WORLD, rank, 0, False, it=1)
    t0 = time.monotonic()
    ckpt.load(sd, d, comm=comm, timeout=3)
    check(mine, want, "load")
    return {"seconds": time.monotonic() - t0}


def causes(comm, rank, d):
    """Rank 0 fails a save (its directory step): with AlreadyExists (iteration 2
    exists), FailedPrecondition (iteration 1 is older), sync and async. Every
    rank raises the cause's class: rank 1 from the typed cause its Aborted
    status carries (Status::cause()), never from the message text."""
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", torch.arange(4.0), replica_id=rank)}
    ckpt.save(sd, d, 2, comm=comm, timeout=10)
    out = {}
    for name, call in (("exists", lambda: ckpt.save(sd, d, 2, comm=comm, timeout=10)),
                       ("older", lambda: ckpt.save(sd, d, 1, comm=comm, timeout=10)),
                       ("async_exists", lambda: ckpt.async_save(sd, d, 2, comm=comm, timeout=10).wait(30)),
                       ("async_older", lambda: ckpt.async_save(sd, d, 1, comm=comm, timeout=10).wait(30))):
        try:
            call()
            out[name] = {"type": None}
        except ckpt.CkptError as e:
            out[name] = {"type": type(e).__name__, "code": e.code, "status_code": e.status_code,
                         "rank": e.rank, "message": e.message}
    return out


def tiers(comm, rank, d):
    """TieredCheckpointer, TP2 x DP2 as 2 nodes x 2 ranks: local saves 2, 4, 6 (snapshots, then
    written, replicated and committed in the background while the live tensors are overwritten),
    global 4 (drained in the background from the local copy; loaded back bitwise); node 1's local dir removed (a fresh node); resume restores local 6 bitwise,
    node 1's ranks fetching their copies from node 0's replicas."""
    import shutil
    tp_rank, dp_rank = rank % 2, rank // 2
    tc = ckpt.TieredCheckpointer(os.path.join(d, "global"), os.path.join(d, "node{node}"), local_every=2,
                                 global_every=4, replicas=1, ranks_per_node=2, comm=comm, layout={"tp": 2, "dp": 2})
    joined = []
    for it in (2, 4, 6):
        sd, live, _ = state(2, tp_rank, dp_rank, True, it=it)
        st = tc.save(sd, it)  # blocks for the snapshot only: written, replicated, committed in the background
        assert st["local"]["mode"] == "background" and (st["global"] is not None) == (it == 4), st
        joined.append(st["joined"])
        for t in live.values():  # training goes on at once: neither tier may see these values
            t.fill_(7)
    joined.append(tc.wait())
    assert [j["iteration"] for j in joined[1:]] == [2, 4, 6], joined
    assert all(j["local"]["network_bytes_sent"] > 0 for j in joined[1:]), joined
    drained = joined[2]["global"]  # the global save of 4, drained in the background from the local copy
    assert drained["iteration"] == 4 and drained["drained_from"].endswith(f"node{rank // 2}/rank_{rank}"), drained
    sd, mine, _ = state(2, tp_rank, dp_rank, False, it=4)
    ckpt.load(sd, os.path.join(d, "global"), iteration=4, comm=comm)
    check(mine, state(2, tp_rank, dp_rank, True, it=4)[1], "global tier drained from local")
    if rank == 2:
        shutil.rmtree(os.path.join(d, "node1"))
        open(os.path.join(d, "node1.removed"), "w").close()
    deadline = time.monotonic() + 30
    while not os.path.exists(os.path.join(d, "node1.removed")) and time.monotonic() < deadline:
        time.sleep(0.01)
    sd, mine, _ = state(2, tp_rank, dp_rank, False, it=6)
    want = state(2, tp_rank, dp_rank, True, it=6)[2]
    loaded, choice = tc.resume(sd)
    assert choice["tier"] == "local" and choice["iteration"] == 6 and choice["global_iteration"] == 4, choice
    check(mine, want, "local tier")
    assert loaded["rng"] == {"tp_rank": tp_rank, "it": 6}, loaded["rng"]
    assert (choice["restore"]["fetched_bytes"] > 0) == (rank >= 2), choice
    return {"why": choice["why"], "fetched": choice["restore"]["fetched_bytes"]}


SCENARIOS = {"causes": causes, "tiers": tiers, "tp": tp_save_load, "dead_kill": lambda c, r, d: dead_rank(c, r, d, "kill"),
             "dead_hang": lambda c, r, d: dead_rank(c, r, d, "hang"),
             "dead_kill1": lambda c, r, d: dead_rank(c, r, d, "kill", victim=1),
             "dies_last": dies_before_last_decision, "async": async_loop, "errors": errors}
# Scenarios where one rank dies: it never reports done (spawn_main).
ONE_DIES = ("dead_kill", "dead_kill1", "dies_last")


def run_scenario(comm, rank, scenario, d):
    path = os.path.join(d, f"result.{scenario}.{rank}.json")
    try:
        res = SCENARIOS[scenario](comm, rank, d)
        res["ok"] = True
    except BaseException as e:  # noqa: BLE001 - reported to the test
        res = {"ok": False, "error": repr(e), "trace": traceback.format_exc()}
    with open(path, "w") as f:
        json.dump(res, f)
    return res["ok"]


def spawn_main(local_rank, world, port, scenario, d):
    """torch.multiprocessing entry: env as torchrun sets it, gloo group, TorchComm."""
    os.environ.update(RANK=str(local_rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="env://")
    ok = run_scenario(ckpt.TorchComm(), dist.get_rank(), scenario, d)
    sys.stdout.flush()
    # Rank 0 hosts torch's TCPStore: as in any torch job it outlives the other
    # ranks' use of it (bounded: a dead rank never reports done).
    store = dist.distributed_c10d._get_default_store()
    store.add("done", 1)
    deadline = time.monotonic() + 15
    while local_rank == 0 and store.add("done", 0) < world - (scenario in ONE_DIES) and time.monotonic() < deadline:
        time.sleep(0.01)
    os._exit(0 if ok else 1)  # no teardown barrier: a dead peer must not hang the survivors


if __name__ == "__main__":
    launcher, scenario, d = sys.argv[1:4]
    assert launcher == "mpi"
    mpi4py = scenario == "errors"  # mpi4py initialises MPI first: ckpt adopts it
    if mpi4py:
        from mpi4py import MPI
        assert MPI.Is_initialized()
    comm = ckpt.MpiComm()
    ok = run_scenario(comm, comm.rank, scenario, d)
    if mpi4py:  # the user's own MPI traffic still works after ckpt's
        assert MPI.COMM_WORLD.allreduce(1) == comm.size
    sys.stdout.flush()
    sys.exit(0 if ok else 1)
