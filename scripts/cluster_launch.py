"""torch.distributed jobs across the nodes of a scripts/cluster.py cluster (issue 31 item 2).

A job is one process per rank, each started inside its node (nsenter) with torchrun's
variables: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR = the first node's
bridge address (rank 0 hosts the TCP store there), MASTER_PORT. Gloo binds to the address
the node's hostname resolves to (its /etc/hosts: the bridge address). Like torchrun, the
first rank to fail ends the others (SIGKILL, by their process ids); every wait has a deadline.

  cluster.py torchrun --host n1:2,n2:2 [--port 29650] [--timeout 300] -- CMD...
  job = TorchJob(cluster, {"n1": 2, "n2": 2}, [python, "-m", "torch_gpt.train", ...]); job.wait(300)

mpirun across nodes: Cluster.mpirun_argv() (cluster.py), run on the "head" node.
"""
from __future__ import annotations

import os
import signal
import subprocess
import time


class TorchJob:
    """Ranks 0..world-1 over {node: ranks} in order (n1 gets ranks 0..k-1, and so on)."""

    def __init__(self, cluster, hosts: dict[str, int], argv: list[str], port: int = 29650,
                 env: dict | None = None, log=None, cwd: str | None = None):
        self.cluster, self.procs = cluster, []  # [(node, rank, Popen)]
        world, rank = sum(hosts.values()), 0
        master = cluster.addr(next(iter(hosts)))
        for node, k in hosts.items():
            for local in range(k):
                e = dict(env or os.environ, RANK=str(rank), WORLD_SIZE=str(world),
                         LOCAL_RANK=str(local), LOCAL_WORLD_SIZE=str(k),
                         MASTER_ADDR=master, MASTER_PORT=str(port))
                p = cluster.popen(node, argv, env=e, cwd=cwd, stdout=log or subprocess.DEVNULL,
                                  stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
                                  start_new_session=True)
                self.procs.append((node, rank, p))
                rank += 1

    def poll(self) -> list:
        return [p.poll() for _, _, p in self.procs]

    def wait(self, timeout: float) -> list[int]:
        """Exit codes of every rank; the first failure ends the rest; TimeoutError past it."""
        deadline = time.monotonic() + timeout
        try:
            while True:
                codes = self.poll()
                if all(c is not None for c in codes):
                    return codes
                if any(c not in (None, 0) for c in codes):
                    self.kill()
                    return [p.wait(10) for _, _, p in self.procs]
                if time.monotonic() > deadline:
                    raise TimeoutError(f"ranks {[r for (_, r, _), c in zip(self.procs, codes) if c is None]}"
                                       f" still running after {timeout:.0f} s")
                time.sleep(0.05)
        except BaseException:
            self.kill()
            raise

    def kill(self) -> None:
        for _, _, p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for _, _, p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
