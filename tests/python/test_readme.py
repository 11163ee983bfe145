"""Runs README.md's "Use it from PyTorch" example verbatim: 4 processes with
RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT set as torchrun would."""
import os
import re
import socket
import subprocess
import sys

README = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "README.md")


def example():
    text = open(README).read()
    m = re.search(r"<!-- example: pytorch -->\n```python\n(.*?)```", text, re.S)
    assert m, "README has no '<!-- example: pytorch -->' python block"
    return m.group(1)


def test_readme_pytorch_example_runs_verbatim(tmp_path):
    code = example()
    assert 15 <= len(code.strip().splitlines()) <= 35
    script = tmp_path / "example.py"
    script.write_text(code)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for rank in range(4):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="4", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   CKPT_ROOT=str(tmp_path / "ck"))
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=120)[0])
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    for rank, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {rank}: exit {p.returncode}\n{out}"
        assert f"rank {rank}: TP4 -> TP2: every value equal; args {{'tp': 4, 'lr': 0.0003}}" in out, out
