"""M121: what a torch.distributed gloo barrier does when a peer never arrives.

Run under mpirun with 2 ranks (rank from OMPI_COMM_WORLD_RANK): both join a gloo
process group created with timeout=TIMEOUT_S (the way Megatron passes
--distributed-timeout-minutes to init_process_group); rank 1 then never reaches
the second barrier. Rank 0 writes RESULT_DIR/rank_0.json with whether the barrier
raised and after how many seconds - so the group timeout is the only bound a
blocking collective has, and with Megatron's default (10 min) that is the wait.
  python3 gloo_barrier_timeout.py RESULT_DIR TIMEOUT_S PORT
"""
import datetime
import json
import os
import sys
import time

import torch.distributed as dist

out, timeout_s, port = sys.argv[1], float(sys.argv[2]), sys.argv[3]
rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=timeout_s))
dist.barrier()  # both are up
if rank == 1:
    time.sleep(timeout_s + 1.5)  # the hung peer: still absent when rank 0 times out, then exits (no watchdog needed)
    sys.exit(0)
t0 = time.monotonic()
result = {"rank": 0, "raised": False, "error": ""}
try:
    dist.barrier()
except RuntimeError as e:  # gloo reports the expired group timeout as a RuntimeError
    result.update(raised=True, error=str(e).splitlines()[0][:200])
result["after_s"] = time.monotonic() - t0
result["torch_default_timeout_s"] = dist.default_pg_timeout.total_seconds()
with open(os.path.join(out, "rank_0.json"), "w") as f:
    json.dump(result, f)
os._exit(0)  # do not wait in destroy for the hung peer
