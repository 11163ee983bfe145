"""Shared fixtures: import path, per-test wall times, training-run helpers.

Run from the repository root:  /usr/bin/python3 -m pytest examples/torch_gpt/tests
(the path below makes `torch_gpt` importable; spawned workers inherit it).
Sizes are tiny so each test stays well under a minute on 2 busy cores.
"""
from __future__ import annotations

import json
import os
import sys

import pytest
import torch

EXAMPLES = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)

from torch_gpt import launch  # noqa: E402

_TIMES: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Wall time per test, fixture set-up (e.g. module-scoped runs) included."""
    _TIMES[report.nodeid] = _TIMES.get(report.nodeid, 0.0) + report.duration
    if report.when == "teardown":
        print(f"\n[wall time] {report.nodeid}: {_TIMES[report.nodeid]:.1f} s")


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_sep("-", "torch_gpt test wall times (set-up included)")
    for nodeid, dt in _TIMES.items():
        terminalreporter.write_line(f"{dt:6.1f} s  {nodeid}")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def run_train(nproc: int, args: list[str], tmp_path, name: str, timeout_s: float = 90.0) -> dict:
    """Runs torch_gpt.train on `nproc` spawned ranks; returns {"log": [records],
    "ref": reference checkpoint dict or None}."""
    log = tmp_path / f"{name}.jsonl"
    ref = tmp_path / f"{name}.pt"
    launch.spawn(launch._train, nproc, (args + ["--log", str(log), "--save-ref", str(ref)],),
                 timeout_s=timeout_s)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    return {"log": records, "ref": torch.load(ref)}


def env_with_path() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = EXAMPLES + os.pathsep + env.get("PYTHONPATH", "")
    return env
