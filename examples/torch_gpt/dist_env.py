"""Process-group start-up from torchrun/SLURM-style environment variables.

The training script reads ONLY RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT (init_from_env). Launchers set them: launch.py (spawn) directly,
and under `mpirun` the shim map_ompi_env() copies OMPI_COMM_WORLD_* into them
before anything reads them (train.py calls it first thing; it changes nothing
when RANK is already set, so torchrun-style launchers win).

Every collective has a timeout: init_process_group gets `timeout`, which gloo
applies to every later collective too, so a dead peer ends a job with an
error instead of a hang.
"""
from __future__ import annotations

import datetime
import os

import torch.distributed as dist

DEFAULT_PORT = 29517
DEFAULT_TIMEOUT_S = 120


_LAUNCHER_VARS = (  # (rank, world size, local rank) as each launcher names them
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)


def map_ompi_env(environ=os.environ) -> bool:
    """mpirun (or srun) shim: sets RANK/WORLD_SIZE/LOCAL_RANK, and MASTER_ADDR/PORT
    defaults (127.0.0.1: one node), from Open MPI's (or SLURM's) variables.
    Returns True if it mapped anything; never overrides an existing RANK."""
    if "RANK" in environ:
        return False
    for rank, size, local in _LAUNCHER_VARS:
        if rank in environ and size in environ:
            environ["RANK"], environ["WORLD_SIZE"] = environ[rank], environ[size]
            environ["LOCAL_RANK"] = environ.get(local, environ[rank])
            environ.setdefault("MASTER_ADDR", "127.0.0.1")
            environ.setdefault("MASTER_PORT", str(DEFAULT_PORT))
            return True
    return False


def init_from_env(timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[int, int]:
    """Initialises the default gloo group from the torchrun variables; returns
    (rank, world_size). A single process without RANK runs alone (world 1)."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = os.environ.get("MASTER_PORT", str(DEFAULT_PORT))
        dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank,
                                world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s))
    return rank, world


def shutdown() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()
