"""Both launchers end to end as subprocesses: `mpirun ... -m torch_gpt.train`
(the OMPI -> RANK/WORLD_SIZE shim) and `python3 -m torch_gpt.launch` (spawn)
give bitwise the same run at one layout."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import env_with_path
from torch_gpt.launch import free_port

ARGS = ["--tp", "2", "--steps", "4", "--micro-batch", "2", "--global-batch", "4"]


def _losses(log) -> list[str]:
    return [json.loads(line)["loss_hex"] for line in log.read_text().splitlines()]


@pytest.mark.skipif(shutil.which("mpirun") is None, reason="no mpirun")
def test_mpirun_and_spawn_launchers_agree(tmp_path):
    spawn_log, mpi_log = tmp_path / "spawn.jsonl", tmp_path / "mpi.jsonl"
    subprocess.run([sys.executable, "-m", "torch_gpt.launch", "--nproc", "2", "--timeout", "90",
                    "--", *ARGS, "--log", str(spawn_log)],
                   env=env_with_path(), check=True, timeout=120, capture_output=True)
    env = env_with_path()
    subprocess.run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
                    "-x", "PYTHONPATH", "-x", f"MASTER_PORT={free_port()}",
                    sys.executable, "-m", "torch_gpt.train", *ARGS, "--log", str(mpi_log)],
                   env=env, check=True, timeout=120, capture_output=True)
    assert len(_losses(spawn_log)) == 4 and _losses(spawn_log) == _losses(mpi_log)
    print(f"mpirun and spawn: 4 TP2 losses bitwise equal ({_losses(mpi_log)[-1]})")


def test_shim_maps_ompi_and_slurm_variables_but_never_overrides_rank():
    from torch_gpt.dist_env import map_ompi_env
    env = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
           "OMPI_COMM_WORLD_LOCAL_RANK": "3"}
    assert map_ompi_env(env) and (env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]) == ("3", "4", "3")
    assert env["MASTER_ADDR"] == "127.0.0.1" and "MASTER_PORT" in env
    env = {"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "MASTER_PORT": "1234"}
    assert map_ompi_env(env) and env["RANK"] == "1" and env["MASTER_PORT"] == "1234"
    env = {"RANK": "0", "WORLD_SIZE": "1", "OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8"}
    assert not map_ompi_env(env) and env["RANK"] == "0"
