"""Fixtures for the multi-node tests (issue 31): a fresh cluster per test, downed after it.

Every test here needs root and namespaces; where they are unavailable each test is SKIPPED
with the reason from cluster.check() (run.py, the ctest entry, exits 77 = ctest "Skipped").
Cluster names derive from this process id, so parallel test processes never share one.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import cluster as cl  # noqa: E402

_WHY_NOT = cl.check()


def _name(i: int) -> str:
    n, s = os.getpid() * 8 + i, ""
    for _ in range(5):
        n, d = divmod(n, 36)
        s += "0123456789abcdefghijklmnopqrstuvwxyz"[d]
    return "t" + s


@pytest.fixture
def make_cluster():
    """make_cluster(n) -> a Cluster with nodes n1..nN (+ head), owned by this process."""
    if _WHY_NOT:
        pytest.skip(f"cluster unavailable: {_WHY_NOT}")
    made = []

    def make(n: int) -> cl.Cluster:
        c = cl.Cluster.up(n, name=_name(len(made)), owner=os.getpid())
        made.append(c)
        return c

    yield make
    for c in made:
        c.down()
