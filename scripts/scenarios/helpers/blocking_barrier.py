"""Negative control of M121: a plain blocking collective with no deadline.

Run under mpirun with 2+ ranks: rank HANG_RANK (default 1) sleeps forever
before the barrier (a hung peer); every other rank calls MPI_Barrier, which has
no timeout. A rank that returns from the barrier writes RESULT_DIR/rank_<r>.json
- none should, until an outside watchdog (the launcher's deadline) kills the job.
  python3 blocking_barrier.py RESULT_DIR [HANG_RANK]
"""
import json
import os
import sys
import time

from mpi4py import MPI

out = sys.argv[1]
hang = int(sys.argv[2]) if len(sys.argv) > 2 else 1
comm = MPI.COMM_WORLD
r = comm.Get_rank()
comm.Barrier()  # everybody is up
with open(os.path.join(out, f"started_{r}"), "w") as f:
    f.write(str(time.time()))
if r == hang:
    while True:
        time.sleep(3600)
t0 = time.monotonic()
comm.Barrier()  # the checkpoint's "vote": blocks forever, no deadline, no error
with open(os.path.join(out, f"rank_{r}.json"), "w") as f:
    json.dump({"rank": r, "returned_after_s": time.monotonic() - t0}, f)
