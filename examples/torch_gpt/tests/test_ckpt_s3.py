"""The GPT job checkpoints to an s3:// root (issue 32 item 5): --save and
--load take s3://bucket/prefix as they take a path (the ckpt package opens
the URL; endpoint and credentials from AWS_*). Server: s3rver
(scripts/install_s3_servers.sh), started here. A 2-step run saves each step to S3, a
second job resumes from iteration 1 there and trains step 2 again with the
same loss as the first job, bit for bit. Skipped with the reason where s3rver is not
installed."""
from __future__ import annotations

import contextlib
import os
import sys

import pytest

from conftest import ckpt_job

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "..", "tests", "s3"))
import s3rver  # noqa: E402  (tests/s3/s3rver.py)

ARGS = ["--model", "tiny", "--micro-batch", "2", "--global-batch", "4"]


@pytest.fixture()
def s3(tmp_path, monkeypatch):
    with contextlib.ExitStack() as stack:
        try:
            env = stack.enter_context(s3rver.running(tmp_path / "s3rver"))
        except s3rver.Unavailable as e:
            pytest.skip(str(e))
        for k, v in env.items():
            monkeypatch.setenv(k, v)  # the jobs inherit them (story.job_env)
        yield


def test_gpt_job_saves_to_s3_and_resumes_from_it(ckpt_build, s3, tmp_path):
    import ckpt
    url = "s3://ckpt-test/gpt/run1"
    first = ckpt_job(ckpt_build, tmp_path, "first", 1,
                     ARGS + ["--steps", 2, "--save", url, "--save-interval", 1])
    assert ckpt.list_iterations(url) == [1, 2]
    assert ckpt.verify(url)["ok"]
    resumed = ckpt_job(ckpt_build, tmp_path, "resumed", 1, ARGS + ["--steps", 2, "--load", url, "--load-iter", 1])
    assert [r["iteration"] for r in resumed] == [2]
    assert resumed[0]["loss_hex"] == first[1]["loss_hex"]  # step 2 again, from the S3 checkpoint, bit for bit
