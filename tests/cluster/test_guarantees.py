"""Save, load and reshard across hosts (issue 31 item 3), with the ckpt CLI under mpirun:
2 nodes x 2 ranks, the shared root a host directory, each rank's hostname its node's.

The reference is the same state saved on one host by one process: the layout-invariant
fingerprint of every save, online reshard and offline reshard made across nodes must equal it.
"""
from __future__ import annotations

import os
import re
import subprocess

CKPT = os.environ.get("CKPT_BIN") or os.path.join(os.path.dirname(__file__), "../../build/cli/ckpt")
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def fingerprint(root) -> str:
    out = subprocess.run([CKPT, "fingerprint", str(root)], capture_output=True, text=True,
                         check=True, timeout=120).stdout
    return re.search(r"fingerprint ([0-9a-f]{64})", out).group(1)


def across(c, cmd: list[str], np: int = 4) -> str:
    """cmd on n1:2,n2:2 under mpirun (launched from the head node); returns its output."""
    r = c.run("head", c.mpirun_argv({"n1": 2, "n2": 2}) + ["-np", str(np), CKPT] + cmd,
              capture_output=True, text=True, env=ENV, timeout=180)
    assert r.returncode == 0, f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout + r.stderr


def test_save_load_online_and_offline_reshard_across_nodes(make_cluster, tmp_path):
    c = make_cluster(2)
    subprocess.run([CKPT, "save", "--root", str(tmp_path / "one_host"), "--iter", "1", "--model",
                    "tiny", "--layout", "tp=1"], check=True, capture_output=True, timeout=120)
    want = fingerprint(tmp_path / "one_host")
    # save: TP2 x PP2 over 2 nodes, every rank writing its shard into the shared root
    out = across(c, ["save", "--root", str(tmp_path / "tp2pp2"), "--iter", "1", "--model", "tiny",
                     "--layout", "tp=2,pp=2"])
    assert "save  iter 1" in out
    files = os.listdir(tmp_path / "tp2pp2" / "iter_0000001")
    assert fingerprint(tmp_path / "tp2pp2") == want
    # online reshard: loaded across nodes as TP2 x DP2, every element checked
    out = across(c, ["load", "--root", str(tmp_path / "tp2pp2"), "--layout", "tp=2,dp=2"])
    assert re.search(r"elements checked [1-9]\d*.*mismatches 0", out), out
    # offline reshard on one node (n2) of what two nodes wrote, to TP4
    r = c.run("n2", [CKPT, "reshard", str(tmp_path / "tp2pp2"), str(tmp_path / "tp4"), "--to", "tp=4"],
              capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert fingerprint(tmp_path / "tp4") == want
    print(f"across 2 nodes x 2 ranks: save tp=2,pp=2 ({len(files)} files), load tp=2,dp=2, "
          f"offline reshard to tp=4 on n2: fingerprint {want[:16]} = the one-host save")
