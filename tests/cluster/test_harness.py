"""The harness itself (issue 31 item 1): nodes are separate hosts in every way a test needs.

One 2-node cluster walks through: own hostnames, private /local, a shared host directory,
TCP on the bridge and nothing routed off it, partition + heal, slow, a whole-node kill,
restart with reused pids, mpirun across nodes, and cleanup (also of a dead owner's cluster).
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import cluster as cl

PY = "/usr/bin/python3"
LISTEN = ("import socket,sys; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1);"
          "s.bind(('0.0.0.0', 47001)); s.listen(8); print('up', flush=True)\n"
          "while True: c,_=s.accept(); c.sendall(b'hi'); c.close()")


def connect(c: cl.Cluster, node: str, to: str, timeout: float = 1.0) -> str:
    code = (f"import socket; s=socket.create_connection(('{to}', 47001), timeout={timeout});"
            "print(s.recv(2).decode())")
    r = c.run(node, [PY, "-c", code], capture_output=True, text=True, timeout=30)
    return r.stdout.strip() if r.returncode == 0 else f"failed: {r.stderr.strip().splitlines()[-1]}"


def out(c: cl.Cluster, node: str, cmd: str) -> str:
    return c.run(node, ["sh", "-c", cmd], capture_output=True, text=True, check=True).stdout.strip()


def test_two_nodes_behave_like_hosts(make_cluster, tmp_path):
    c = make_cluster(2)
    first = out(c, "n2", "echo $$")  # the first process on a fresh node
    assert [out(c, n, "hostname") for n in ("n1", "n2", "head")] == ["n1", "n2", "head"]
    # /local is private to each node; the host directory is shared by all
    out(c, "n1", f"echo one > /local/f && echo shared > {tmp_path}/s")
    assert out(c, "n2", "ls /local | wc -l") == "0"
    assert out(c, "n2", f"cat {tmp_path}/s") == "shared"
    assert not os.path.exists("/local/f")
    # TCP on the bridge by name; no route off it (no default route, only 10.231.0.0/24)
    server = c.popen("n1", [PY, "-c", LISTEN], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "up"
        assert connect(c, "n2", "n1") == "hi"
        assert "default" not in out(c, "n2", "ip route")
        assert "unreachable" in connect(c, "n2", "192.0.2.1").lower()
        # partition: n2's packets are dropped silently (a timeout, not a refusal); heal restores
        c.partition("n2")
        assert "timed out" in connect(c, "n2", "n1")
        c.heal()
        assert connect(c, "n2", "n1") == "hi"
        how = c.slow("n2", delay_ms=100, loss_pct=1, rate="8mbit")
        assert how.startswith(("netem", "tbf")), how
        assert "qdisc " + how.split()[0] in out(c, "n2", "tc qdisc show dev eth0")
        assert connect(c, "n2", "n1", timeout=5) == "hi"
        c.heal()
        assert how.split()[0] not in out(c, "n2", "tc qdisc show dev eth0")
    finally:
        server.kill()
        server.wait()
    # pids are per node: a restarted node reuses them
    sleeper = c.popen("n2", ["sleep", "600"])
    t0 = time.monotonic()
    c.kill("n2")
    assert sleeper.wait(timeout=5) != 0 and time.monotonic() - t0 < 5
    assert c.status()["nodes"]["n2"]["up"] is False
    c.restart("n2")
    assert out(c, "n2", "echo $$") == first
    assert out(c, "n2", "ls /local | wc -l") == "0"


def test_mpirun_spans_nodes(make_cluster):
    c = make_cluster(2)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    r = c.run("head", c.mpirun_argv({"n1": 2, "n2": 2}) + [
        "-np", "4", "sh", "-c", "echo $(hostname) $OMPI_COMM_WORLD_RANK"],
        capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split("\n")[:-1]) == ["n1 0", "n1 1", "n2 2", "n2 3"]


def test_everything_removed_also_after_owner_killed():
    if cl.check():
        import pytest
        pytest.skip(cl.check())
    owner = subprocess.Popen(["sleep", "600"])
    name = f"g{os.getpid() % 100000}"
    c = cl.Cluster.up(1, name=name, owner=owner.pid)
    assert cl.Cluster(name).state
    owner.kill()
    owner.wait()
    # the next `up` of any cluster collects it (its owner is dead), then downs its own
    cl.Cluster.up(1, name=f"h{os.getpid() % 100000}", owner=os.getpid()).down()
    assert not cl.Cluster(name).state
    names = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"{cl.PREFIX}{name}-" not in names and f"{cl.PREFIX}{name}-" not in " ".join(cl._list_netns())
    assert not (cl.STATE_ROOT / name).exists()
    del c
