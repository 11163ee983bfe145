#!/usr/bin/env python3
"""Self-test of evidence_check.py (ctest: evidence_check_selftest): the committed
texts pass against the committed evidence; a copy with one tagged number typed
differently, one with a tag naming an unmeasured value, and one with a stale
evidence row each fail, naming the file and the value."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "..", "..", "seeds", "level8")
CHECK = [sys.executable, os.path.join(HERE, "evidence_check.py")]


def run(seeds):
    p = subprocess.run(CHECK + ["--seeds", seeds], capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout + p.stderr


def mutate(src, dst, fn):
    shutil.copytree(src, dst)
    path = os.path.join(dst, "M111.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(fn(text))


def main():
    rc, out = run(SEEDS)
    assert rc == 0, f"committed texts must pass:\n{out}"
    with tempfile.TemporaryDirectory() as tmp:
        cases = {
            "typed": (lambda t: re.sub(r"([0-9][0-9,]*)(<!--ev:written_bytes-->)", r"1\1\2", t, count=1), "written_bytes"),
            "unmeasured": (lambda t: t.replace("<!--ev:written_bytes-->", "<!--ev:not_a_measurement-->", 1),
                           "not_a_measurement"),
            "stale_row": (lambda t: t.replace("<!-- evidence:end -->", "edited by hand\n<!-- evidence:end -->", 1),
                          "evidence row differs"),
        }
        for name, (fn, needle) in cases.items():
            d = os.path.join(tmp, name)
            mutate(SEEDS, d, fn)
            rc, out = run(d)
            assert rc == 1 and needle in out and "M111.md" in out, f"{name}: rc={rc}\n{out}"
            print(f"{name}: rejected as expected")
    print("evidence_check self-test: OK")


if __name__ == "__main__":
    main()
