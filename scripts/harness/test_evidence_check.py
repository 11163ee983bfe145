#!/usr/bin/env python3
"""Self-test of evidence_check.py (ctest: evidence_check_selftest): the committed
texts pass against the committed evidence; a copy with one tagged number typed
differently, one with a tag naming an unmeasured value, one with a stale
evidence row, one whose generated label (M118) says the opposite of what the
evidence selects, one whose table row names a field the evidence no longer
contains, one whose scoring line cites such a field, one whose prose cites a
negative-control field (`nc.x`) the evidence does not contain, and one with a question
numbered in the seed's Level 9 range (M125) each fail, naming the file."""
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


def mutate(src, dst, fn, name="M111.md"):
    shutil.copytree(src, dst)
    path = os.path.join(dst, name)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    with open(path, "w", encoding="utf-8") as f:
        f.write(fn(text))


def flip_label(text):
    """Replaces the generated text of the first label by its other branch."""
    m = re.search(r"<!--evl:([^?]+)\?([^|]*)\|(.*?)-->(.*?)<!--/evl-->", text, re.S)
    assert m, "M118 has no generated label"
    other = m.group(3) if m.group(4) == m.group(2) else m.group(2)
    return text[:m.start(4)] + other + text[m.end(4):]


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
            # the committed label of M118's "steady blocking vs memcpy" row flipped to the other branch
            "label": (flip_label, "evidence selects", "M118.md"),
            "row_field": (lambda t: t.replace("`written_bytes` = `unique_bytes`", "`written_bytes` = `unique_bytes_old`", 1),
                          "unique_bytes_old"),
            "cited_field": (lambda t: t.replace("- 工程验证（1 分）：引用 `embedding_files`", "- 工程验证（1 分）：引用 `embedding_file_count`", 1),
                            "embedding_file_count", "M114.md"),
            # a follow-up answer's prose (not a table row, not a scoring line) citing a control value
            "prose_nc_field": (lambda t: t.replace("M115 的 `nc.partial_iter20_dirs` 就是", "M115 的 `nc.partial_dirs_old` 就是", 1),
                               "nc.partial_dirs_old", "M115.md"),
            "level9_number": (lambda t: t, "Level 9", "M125.md"),
        }
        for name, case in cases.items():
            fn, needle = case[0], case[1]
            target = case[2] if len(case) > 2 else "M111.md"
            d = os.path.join(tmp, name)
            if name == "level9_number":
                mutate(SEEDS, d, fn)
                shutil.copy(os.path.join(d, "M124.md"), os.path.join(d, target))
            else:
                mutate(SEEDS, d, fn, target)
            with open(os.path.join(d, target), encoding="utf-8") as f:
                assert name == "level9_number" or f.read() != open(os.path.join(SEEDS, target), encoding="utf-8").read(), \
                    f"{name}: the mutation did not apply"
            rc, out = run(d)
            assert rc == 1 and needle in out and target in out, f"{name}: rc={rc}\n{out}"
            print(f"{name}: rejected as expected")
    print("evidence_check self-test: OK")


if __name__ == "__main__":
    main()
