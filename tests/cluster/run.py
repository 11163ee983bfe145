#!/usr/bin/env python3
"""ctest entry: `run.py PYTEST_ARGS...` runs pytest on tests/cluster files, or exits 77
(ctest SKIP_RETURN_CODE: reported "Skipped", never "Passed") printing why the machine
cannot host a cluster (not root, no namespaces, no bridge)."""
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import cluster  # noqa: E402

why = cluster.check()
if why:
    print(f"SKIPPED: cluster tests need network/UTS/mount/pid namespaces: {why}")
    sys.exit(77)
sys.exit(subprocess.call([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          *sys.argv[1:]]))
