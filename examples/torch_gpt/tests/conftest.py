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


# --- checkpoints through ckpt (test_ckpt_*.py): the built CLI and Python package ---
REPO = os.path.dirname(EXAMPLES)
CKPT_BUILD = os.path.abspath(os.environ.get("CKPT_BUILD", os.path.join(REPO, "build")))


@pytest.fixture(scope="session")
def ckpt_build() -> str:
    """The build dir holding cli/ckpt and the ckpt Python package; fails (never
    skips) when they are missing, so a ctest run cannot pass without them."""
    from torch_gpt import story
    if not os.path.exists(story.ckpt_bin(CKPT_BUILD)):
        pytest.fail(f"no ckpt CLI under {CKPT_BUILD} (build it, or set CKPT_BUILD)")
    os.environ.setdefault("CKPT_PYTHONPATH", os.path.join(CKPT_BUILD, "python"))
    from torch_gpt.ckpt_io import import_ckpt
    import_ckpt()
    return CKPT_BUILD


def ckpt_job(build: str, d, name: str, nproc: int, args: list, launcher: str = "spawn",
             timeout_s: float = 180) -> list[dict]:
    """Runs torch_gpt.train (ckpt options in args) as its own process tree;
    returns its per-step log records."""
    from torch_gpt import story
    log = os.path.join(str(d), f"{name}.jsonl")
    cmd = story.train_cmd(nproc, [str(x) for x in args] + ["--log", log], launcher, timeout_s)
    story.run(cmd, build, timeout_s=timeout_s + 30)
    return story.read_jsonl(log)
