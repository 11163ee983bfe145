"""s3rver (npm; scripts/install_s3_servers.sh) on 127.0.0.1 for the Python tests
that need an S3 endpoint: a free port, a fresh data dir, bucket "ckpt-test",
credentials S3RVER/S3RVER. `running(data_dir)` yields the AWS_* variables
(endpoint, region, credentials) and kills the server at the end; it raises
Unavailable (the caller skips with its reason) when s3rver is not installed or
does not answer within 20 s. The C++ suites use tests/../harness/s3_server.h."""
import contextlib
import os
import socket
import subprocess
import time

S3RVER = os.environ.get("CKPT_S3RVER",
                        os.path.join(os.environ.get("CKPT_TOOLS_DIR", "/opt/ckpt-tools"), "node_modules/.bin/s3rver"))
BUCKET = "ckpt-test"


class Unavailable(Exception):
    """s3rver cannot serve here; the message says why."""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(data_dir, start_timeout_s=20):
    if not os.access(S3RVER, os.X_OK):
        raise Unavailable(f"s3rver not installed at {S3RVER} (scripts/install_s3_servers.sh)")
    port = _free_port()
    proc = subprocess.Popen([S3RVER, "-d", str(data_dir), "-a", "127.0.0.1", "-p", str(port), "--silent",
                             "--configure-bucket", BUCKET], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise Unavailable(f"s3rver did not start within {start_timeout_s} s")
                time.sleep(0.1)
        yield {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_REGION": "us-east-1",
               "AWS_ACCESS_KEY_ID": "S3RVER", "AWS_SECRET_ACCESS_KEY": "S3RVER"}
    finally:
        proc.kill()
        proc.wait(timeout=10)
