"""ckpt.list_iterations / ckpt.latest on an s3:// root (issue 32 item 5, first
step): the binding registers the s3 scheme; endpoint and credentials come from
AWS_* at each call. Server: s3rver (scripts/install_s3_servers.sh), started
here; objects are put with curl's own SigV4 (--aws-sigv4), as the backend's
commit leaves them (FORMAT.md 2b: iter_N/manifest.json, the tracker).
Skipped with the reason where s3rver is not installed."""
import contextlib
import os
import subprocess
import sys

import pytest

import ckpt

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "s3"))
import s3rver  # noqa: E402  (tests/s3/s3rver.py)


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    with contextlib.ExitStack() as stack:
        try:
            env = stack.enter_context(s3rver.running(tmp_path_factory.mktemp("s3rver")))
        except s3rver.Unavailable as e:
            pytest.skip(str(e))
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        yield env["AWS_ENDPOINT_URL"]
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def put(endpoint, key, body):
    subprocess.run(["curl", "-sSf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user", "S3RVER:S3RVER",
                    "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD", "-X", "PUT", "--data-binary", body, f"{endpoint}/ckpt-test/{key}"], check=True, timeout=30)


def test_list_and_latest_on_s3_root(s3):
    for it in (3, 12):
        put(s3, f"py/iter_{it:07d}/manifest.json", "{}")
    put(s3, "py/iter_0000020.abc/rank_00000.h5", "staged, never published")  # not an iteration
    put(s3, "py/latest_checkpointed_iteration.txt", "12\n")
    assert ckpt.list_iterations("s3://ckpt-test/py") == [3, 12]
    assert ckpt.latest("s3://ckpt-test/py") == 12


def test_missing_credentials_name_the_variable(s3):
    key = os.environ.pop("AWS_ACCESS_KEY_ID")
    try:
        with pytest.raises(ckpt.CkptError) as e:
            ckpt.list_iterations("s3://ckpt-test/py")
    finally:
        os.environ["AWS_ACCESS_KEY_ID"] = key
    assert "AWS_ACCESS_KEY_ID" in str(e.value) and "s3://ckpt-test/py" in str(e.value)
    assert "S3RVER" not in str(e.value).replace("AWS_", "")


def test_save_load_on_s3_root_equals_posix(s3, tmp_path):
    """ckpt.save / ckpt.load / verify / fingerprint on s3://bucket/prefix as on
    a path: the same checkpoint (fingerprint equal), loaded back element for
    element; a missing iteration names the URL."""
    import numpy as np
    url, posix = "s3://ckpt-test/py/run1", str(tmp_path / "run1")
    w = np.arange(64 * 24, dtype=np.float32).reshape(64, 24)
    for root in (posix, url):
        ckpt.save({"w": ckpt.ShardedTensor.from_rank_offsets("w", w)}, root, 100)
    assert ckpt.list_iterations(url) == [100] and ckpt.latest(url) == 100
    back = np.zeros_like(w)
    ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", back)}, url)
    assert (back == w).all()
    assert ckpt.verify(url)["ok"]
    assert ckpt.fingerprint(url) == ckpt.fingerprint(posix)
    with pytest.raises(ckpt.CkptError) as e:
        ckpt.load({"w": ckpt.ShardedTensor.from_rank_offsets("w", back)}, url, iteration=5)
    assert url in str(e.value)
