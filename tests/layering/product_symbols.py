#!/usr/bin/env python3
"""Product -> harness never, in the built binaries (issue 35 item 2).

  product_symbols.py --lab <ckpt-lab> <product file>...

Each product file (the `ckpt` command, libckpt*.so, the _ckpt Python module:
what `make install` and pip install) must define no harness symbol (nm -C:
negative controls and test controls in ckpt::testing, fault injection and
campaigns in ckpt::faults, ckpt-lab's commands and seam, gtest) and load no
harness library (ldd). The negative control: ckpt-lab, which links the
harness, must show such symbols, or the patterns have gone stale and the
check could not fail. Exit 0 clean, 1 with one line per finding, 2 on bad input.
"""
import argparse
import re
import subprocess
import sys

# Demangled names of harness code: the namespaces of harness/ and faults/,
# the commands and seam of harness/lab, googletest.
HARNESS_SYMBOL = re.compile(
    r"\bckpt::(testing|faults)::"
    r"|\bckpt::cli::(Run(CampaignCmd|DeadlineCmd|FaultChild|PowerLoss|Damage|Scenario)|Register(Faults|Lab)|LabSeam)\b"
    r"|(^|[^:\w])testing::(Test|internal)\b")
HARNESS_LIBRARY = re.compile(r"ckpt_(harness|faults|test_support|testing)|libgtest")


def defined_symbols(path):
    out = subprocess.run(["nm", "-C", "--defined-only", path], capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():  # stripped or a shared object: its dynamic table
        out = subprocess.run(["nm", "-C", "-D", "--defined-only", path], capture_output=True, text=True)
    if out.returncode != 0:
        raise OSError(f"nm {path}: {out.stderr.strip()}")
    return [line.split(" ", 2)[-1] for line in out.stdout.splitlines() if line.strip()]


def findings(path):
    found = [f"{path}: defines harness symbol {s}" for s in defined_symbols(path) if HARNESS_SYMBOL.search(s)]
    ldd = subprocess.run(["ldd", path], capture_output=True, text=True)
    found += [f"{path}: loads harness library {line.strip()}" for line in ldd.stdout.splitlines()
              if HARNESS_LIBRARY.search(line)]
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lab", required=True, help="ckpt-lab: the negative control (must show harness symbols)")
    ap.add_argument("product", nargs="+", help="installed product files: ckpt, libckpt*.so, _ckpt*.so")
    a = ap.parse_args()
    try:
        lab = findings(a.lab)
        problems = [f for p in a.product for f in findings(p)]
    except OSError as e:
        print(f"product_symbols: {e}", file=sys.stderr)
        return 2
    for p in problems[:50]:
        print(p)
    if not lab:
        print(f"product_symbols: negative control failed: {a.lab} shows no harness symbol (stale patterns?)")
        return 1
    if problems:
        print(f"product_symbols: {len(problems)} harness symbol(s)/library(ies) in the product")
        return 1
    print(f"product_symbols ok: no harness symbol or library in {len(a.product)} product file(s); "
          f"the control {a.lab} shows {len(lab)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
