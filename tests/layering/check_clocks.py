#!/usr/bin/env python3
"""No decision of ckpt reads a wall clock (issue 31 item 4e: nodes whose clocks differ).

Every deadline, stall, lease and progress decision uses a monotonic clock (C++
std::chrono::steady_clock, Python time.monotonic); the lease on a save's tmp dir is a
flock, with no time in it. This check fails if a wall-clock API appears in the library,
the CLI, the fault tools or the Python package, so a clock-dependent decision cannot
creep in unseen. A line that must read the wall clock for a human (a log stamp) says so
with "wall-clock: display only" on that line. One exception, only under ckpt/storage/s3:
an object store cannot see a process die, so its save lease is a time lease whose expiry
writers on different hosts compare ("wall-clock: object-store lease", FORMAT.md 2b: the
writers' clocks must agree to well within the lease).

  check_clocks.py --root SRC     check the tree
  check_clocks.py --self-test    show that the check fails on a wall-clock read
"""
import argparse
import pathlib
import re
import sys
import tempfile

DIRS = ["ckpt", "cli", "faults", "python/ckpt"]
WALL = re.compile(r"system_clock|gettimeofday|CLOCK_REALTIME|\btime\(\s*(nullptr|NULL|0)?\s*\)|"
                  r"\blocaltime|\bgmtime|st_mtim|\btime\.time\(|datetime\.now|datetime\.utcnow")
EXEMPT = "wall-clock: display only"
LEASE_EXEMPT, LEASE_DIR = "wall-clock: object-store lease", "ckpt/storage/s3/"


def find(root: pathlib.Path) -> list:
    hits = []
    for d in DIRS:
        for f in sorted((root / d).rglob("*")):
            if f.suffix not in (".cc", ".h", ".py") or not f.is_file():
                continue
            for i, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
                lease_ok = LEASE_EXEMPT in line and f.relative_to(root).as_posix().startswith(LEASE_DIR)
                if WALL.search(line) and EXEMPT not in line and not lease_ok:
                    hits.append(f"{f.relative_to(root)}:{i}: {line.strip()}")
    return hits


def self_test() -> int:
    with tempfile.TemporaryDirectory() as t:
        root = pathlib.Path(t)
        (root / "ckpt").mkdir()
        (root / "ckpt/ok.cc").write_text("auto t = std::chrono::steady_clock::now();\n")
        assert find(root) == [], find(root)
        (root / "ckpt/bad.cc").write_text("auto t = std::chrono::system_clock::now();\n")
        (root / "ckpt/bad2.cc").write_text("if (st.st_mtim.tv_sec < now) remove();\n")
        assert len(find(root)) == 2, find(root)
        (root / "ckpt/storage/s3").mkdir(parents=True)
        lease = "auto t = std::chrono::system_clock::now();  // wall-clock: object-store lease\n"
        (root / "ckpt/storage/s3/lease.cc").write_text(lease)
        assert len(find(root)) == 2, find(root)  # allowed there
        (root / "ckpt/lease_elsewhere.cc").write_text(lease)
        assert len(find(root)) == 3, find(root)  # nowhere else
    print("check_clocks self-test: ok")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", type=pathlib.Path)
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    hits = find(a.root)
    for h in hits:
        print("wall clock read:", h)
    print(f"check_clocks: {len(hits)} wall-clock read(s) in {', '.join(DIRS)}")
    return 1 if hits else 0


if __name__ == "__main__":
    sys.exit(main())
