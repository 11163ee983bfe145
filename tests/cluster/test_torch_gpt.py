"""The PyTorch GPT job (examples/torch_gpt) across 2 nodes x 2 ranks (issue 31 items 2, 3):
torch.distributed with the TCP store on n1's bridge address, ckpt.TorchComm as ckpt's control
plane, async saves into the shared root. Its losses equal the same job on one host (4 ranks on
n1) bit for bit; both nodes are SIGKILLed while a save is in flight; resumed across the nodes
from the last committed iteration, under mpirun with ckpt.MpiComm this time, it ends bitwise
equal (every loss, every tensor) to the one-host run.
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "examples"))
sys.path.insert(0, str(REPO / "scripts"))
from cluster_launch import TorchJob  # noqa: E402
from torch_gpt import story  # noqa: E402

BUILD = os.environ.get("CKPT_BUILD_DIR") or str(REPO / "build")
N, K = 8, 2  # steps, save interval
JOB = ["--model", "tiny", "--tp", "2", "--micro-batch", "2", "--global-batch", "8",
       "--dropout", "0.1", "--steps", str(N)]
HOSTS = {"n1": 2, "n2": 2}
TRAIN = [story.PYTHON, "-m", "torch_gpt.train"]


def in_flight(root: Path, min_iteration: int):
    for it, path in story._in_flight_saves(str(root), min_iteration):
        if story._listing(path):
            return it
    return None


def test_gpt_across_nodes_killed_mid_save_resumes_bitwise(make_cluster, tmp_path):
    c = make_cluster(2)
    env = story.job_env(BUILD)
    with open(tmp_path / "one_host.out", "w") as log:  # the same 4 ranks on one host: n1
        job = TorchJob(c, {"n1": 4}, TRAIN + JOB + ["--save", str(tmp_path / "one_host"),
                                                    "--log", str(tmp_path / "one_host.jsonl")],
                       port=29650, env=env, log=log, cwd=str(REPO))
        assert job.wait(240) == [0] * 4, (tmp_path / "one_host.out").read_text()[-3000:]
    one_host = {r["iteration"]: r["loss_hex"] for r in story.read_jsonl(tmp_path / "one_host.jsonl")}
    root = tmp_path / "ckpt"
    with open(tmp_path / "crash.out", "w") as log:
        job = TorchJob(c, HOSTS, TRAIN + JOB + ["--save", str(root), "--save-interval", str(K),
                                                "--async-save", "--log", str(tmp_path / "crash.jsonl")],
                       port=29651, env=env, log=log, cwd=str(REPO))
        deadline, caught = time.monotonic() + 240, None
        while caught is None and time.monotonic() < deadline and None in job.poll():
            caught = in_flight(root, 2 * K)
            time.sleep(0.002)
        c.kill("n1")
        c.kill("n2")
        job.wait(10)
    assert caught, f"no save of iteration >= {2 * K} caught in flight:\n{(tmp_path / 'crash.out').read_text()[-3000:]}"
    committed = story.committed_iterations(str(root))
    resume_at = max(i for i in committed if i < caught)
    assert story.ckpt_json(BUILD, "verify", str(root))["ok"]
    crash = story.read_jsonl(tmp_path / "crash.jsonl")
    assert crash and all(r["loss_hex"] == one_host[r["iteration"]] for r in crash)
    c.restart("n1")
    c.restart("n2")
    # the resume under the other launcher: mpirun across the nodes, ckpt.MpiComm
    env.update(MASTER_ADDR=c.addr("n1"), MASTER_PORT="29652", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = c.run("head", c.mpirun_argv(HOSTS) + [
        "-np", "4", "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS", "-x", "MASTER_ADDR", "-x",
        "MASTER_PORT"] + TRAIN + JOB + ["--ckpt-comm", "mpi", "--load", str(root), "--load-iter",
                                        str(resume_at), "--save", str(tmp_path / "resumed"),
                                        "--log", str(tmp_path / "resumed.jsonl")],
              env=env, cwd=str(REPO), capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    resumed = story.read_jsonl(tmp_path / "resumed.jsonl")
    assert [r["iteration"] for r in resumed] == list(range(resume_at + 1, N + 1))
    assert all(r["loss_hex"] == one_host[r["iteration"]] for r in resumed)
    d = story.compare_digests(story.tensor_digests(BUILD, str(tmp_path / "one_host"), N),
                              story.tensor_digests(BUILD, str(tmp_path / "resumed"), N))
    print(f"GPT TP2xDP2 on 2 nodes: {len(crash)} steps bitwise = one host; SIGKILL of both nodes "
          f"in the save of iteration {caught} (committed {committed}); resumed (mpirun, MpiComm) from {resume_at}: "
          f"{len(resumed)} losses and {d['tensors_equal']}/{d['tensors']} tensors bitwise equal")
    assert not d["differing"] and d["tensors"] > 60
