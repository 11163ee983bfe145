#!/usr/bin/env python3
"""Style (docs/DESIGN.md "Style"): the size budget, include order and
clang-format, as one ctest (`style`) that runs in `make test`.

  1. Size budget: scripts/code_size.py's rules (cli/ files <= 200 lines,
     functions <= 60 lines outside tests), no exceptions.
  2. Include order (Google's, the order clang-format sorts into): the file's
     own header, C and library headers <x.h>, C++ headers <x>, project
     headers "x"; each block of adjacent #includes sorted by that category,
     then by name. Includes inside #if are not checked.
  3. clang-format (.clang-format, clang-format 14): the lines it would change.

The tree was not reformatted as a whole (other work edits it in parallel), so
checks 2 and 3 compare each file with a recorded baseline
(scripts/style_baseline.json: per file its hash and counts): a file may not
get worse, a new file must be clean. A file whose bytes equal the baseline's
is not re-run. After improving a file, `--update-baseline` records it; after
a new file's `clang-format -i`, nothing needs recording.

Exit 0 clean, 1 on a violation, 77 when clang-format 14 is missing (ctest
reports the test Skipped; checks 1 and 2 still ran and passed).
--self-test runs each check on made-up files it must flag (and clean ones it
must pass): the negative control of `style_self_test`.
"""
import argparse
import concurrent.futures
import difflib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import code_size  # noqa: E402  (the size budget's rules live there)

SRC_DIRS = ["ckpt", "reshard", "faults", "cli", "bench", "examples", "tests", "python"]
EXTS = (".cc", ".h", ".c", ".cpp", ".hpp", ".cu", ".cuh")
BASELINE = os.path.join("scripts", "style_baseline.json")
CLANG_FORMAT_MAJOR = 14
INCLUDE_RE = re.compile(r'\s*#\s*include\s*([<"][^>"]+[>"])')


def sources(root):
    """Repository-relative C/C++ files under SRC_DIRS (build trees skipped)."""
    out = []
    for top in SRC_DIRS:
        for dirpath, dirnames, names in os.walk(os.path.join(root, top)):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and
                                 not os.path.exists(os.path.join(dirpath, d, "CMakeCache.txt")))
            out += [os.path.relpath(os.path.join(dirpath, n), root) for n in sorted(names) if n.endswith(EXTS)]
    return out


# ---- include order ------------------------------------------------------------
def include_category(inc, own):
    """0 own header, 1 <x.h>, 2 <x>, 3 "x" (clang-format's Google categories)."""
    if own and inc[1:-1] == own:
        return 0
    if inc.startswith("<"):
        return 1 if inc.endswith(".h>") and not inc.startswith("<ext/") else 2
    return 3


def include_blocks(text):
    """[(first line, [include, ...])] of adjacent top-level #include lines."""
    blocks, cur, depth, guard_seen = [], None, 0, False
    for lineno, line in enumerate(text.split("\n"), 1):
        m = INCLUDE_RE.match(line)
        if m and depth == 0:
            cur = cur or (lineno, [])
            cur[1].append(m.group(1))
            continue
        if cur:
            blocks.append(cur)
            cur = None
        s = line.strip()
        if re.match(r"#\s*(if|ifdef|ifndef)\b", s):
            # A header guard (#ifndef X_H_ before anything else) is not a condition.
            if not guard_seen and re.match(r"#\s*ifndef\s+\w+_H_?\s*$", s):
                guard_seen = True
                continue
            depth += 1
        elif re.match(r"#\s*endif\b", s) and depth > 0:
            depth -= 1
    if cur:
        blocks.append(cur)
    return blocks


def include_problems(path, text):
    """Messages for unsorted blocks and includes after a later category."""
    stem, ext = os.path.splitext(path)
    own = stem + ".h" if ext in (".cc", ".c", ".cpp", ".cu") else None
    key = lambda inc: (include_category(inc, own), inc)
    problems, highest = [], 0
    names = {0: "own header", 1: "<x.h>", 2: "<x>", 3: '"x"'}
    for first, incs in include_blocks(text):
        if incs != sorted(incs, key=key):
            problems.append(f"{path}:{first}: include block not sorted (want: {', '.join(sorted(incs, key=key))})")
        for inc in incs:
            c = include_category(inc, own)
            if c == 0:
                continue  # the own header may lead or sit with the project's
            if c < highest:
                problems.append(f"{path}: {inc} ({names[c]}) after a {names[highest]} include")
            highest = max(highest, c)
    return problems


# ---- clang-format -------------------------------------------------------------
def find_clang_format():
    """(path, None) of a clang-format CLANG_FORMAT_MAJOR, or (None, why not)."""
    seen = []
    for name in (f"clang-format-{CLANG_FORMAT_MAJOR}", "clang-format"):
        exe = shutil.which(name)
        if not exe:
            continue
        out = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout
        m = re.search(r"version (\d+)\.", out)
        if m and int(m.group(1)) == CLANG_FORMAT_MAJOR:
            return exe, None
        seen.append(f"{exe}: {out.strip()}")
    return None, (f"clang-format {CLANG_FORMAT_MAJOR} not found (scripts/install_deps.sh installs it)" +
                  (f"; found {'; '.join(seen)}" if seen else ""))


def format_changes(exe, root, path, text):
    """Lines of `path` that clang-format (the tree's .clang-format) would change."""
    res = subprocess.run([exe, "--style=file", f"--assume-filename={os.path.join(root, path)}"],
                         input=text, capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise RuntimeError(f"clang-format failed on {path}: {res.stderr.strip()}")
    ops = difflib.SequenceMatcher(None, text.split("\n"), res.stdout.split("\n"), autojunk=False).get_opcodes()
    return sum(max(i2 - i1, j2 - j1) for tag, i1, i2, j1, j2 in ops if tag != "equal")


# ---- the baseline -------------------------------------------------------------
def digest(data):
    return hashlib.sha1(data).hexdigest()[:16]


def measure(root, paths, exe, jobs):
    """{path: {"sha1", "include_order", "clang_format"}} (clang_format None without exe)."""
    def one(path):
        data = open(os.path.join(root, path), "rb").read()
        text = data.decode("utf-8", errors="replace")
        return path, {"sha1": digest(data), "include_order": len(include_problems(path, text)),
                      "clang_format": format_changes(exe, root, path, text) if exe else None}
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        return dict(pool.map(one, paths))


def load_baseline(path):
    if not os.path.exists(path):
        return {"files": {}}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def style_digest(root):
    """Hash of .clang-format's settings (its comments may change freely)."""
    lines = open(os.path.join(root, ".clang-format"), "rb").read().split(b"\n")
    return digest(b"\n".join(l for l in lines if l.strip() and not l.lstrip().startswith(b"#")))


def compare(root, base, exe, jobs):
    """Messages for files worse than the baseline; (messages, improved paths)."""
    files, same_style = base.get("files", {}), base.get("clang_format_style") == style_digest(root)
    todo = []
    for path in sources(root):
        rec = files.get(path)
        data = open(os.path.join(root, path), "rb").read()
        if not (rec and same_style and rec["sha1"] == digest(data)):
            todo.append(path)
    # A moved file (git mv) keeps its debt: found by its bytes.
    by_hash = {r["sha1"]: r for r in files.values()} if same_style else {}
    bad, improved = [], []
    for path, got in sorted(measure(root, todo, exe, jobs).items()):
        rec = files.get(path) or by_hash.get(got["sha1"], {})
        text = open(os.path.join(root, path), encoding="utf-8", errors="replace").read()
        if got["include_order"] > rec.get("include_order", 0):
            bad += include_problems(path, text)
            bad.append(f"{path}: {got['include_order']} include-order problems, baseline "
                       f"{rec.get('include_order', 0)}")
        cf, was = got["clang_format"], rec.get("clang_format", 0)
        if cf is not None and cf > was:
            bad.append(f"{path}: clang-format would change {cf} lines, baseline {was}: run "
                       f"`clang-format -i {path}` (a new file) or format the lines you changed")
        if got["include_order"] < rec.get("include_order", 0) or (cf is not None and cf < was):
            improved.append(path)
    return bad, improved


def write_baseline(root, path, exe, jobs):
    files = measure(root, sources(root), exe, jobs)
    out = {"comment": "scripts/style_check.py --update-baseline; per file: sha1 (first 16 hex), "
                      "include_order and clang_format counts a change may not raise",
           "clang_format_style": style_digest(root), "files": files}
    # One line per file: a later --update-baseline diffs file by file.
    rows = ",\n".join(f"  {json.dumps(p)}: {json.dumps(files[p], sort_keys=True)}" for p in sorted(files))
    head = json.dumps({k: v for k, v in out.items() if k != "files"}, indent=1, sort_keys=True)[:-2]
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{head},\n \"files\": {{\n{rows}\n }}\n}}\n")
    dirty = sum(1 for r in files.values() if r["include_order"] or r["clang_format"])
    print(f"baseline: {len(files)} files, {dirty} with recorded debt -> {path}")


def check(root, baseline, jobs):
    status = 0
    bad_files, bad_fns = code_size.offenders(root, 60, 200)
    for n, rel in bad_files:
        print(f"size: {rel}: {n} lines (cli/ files <= 200)")
    for n, where, fn in bad_fns:
        print(f"size: {where}: function {fn} is {n} lines (<= 60)")
    status |= bool(bad_files or bad_fns)
    exe, why = find_clang_format()
    bad, improved = compare(root, load_baseline(baseline), exe, jobs)
    for line in bad:
        print(line)
    status |= bool(bad)
    if improved:
        print(f"better than the baseline (record with --update-baseline): {', '.join(improved)}")
    if status:
        return 1
    if why:
        print(f"size and include order ok; clang-format check NOT run: {why}")
        return 77
    print("style ok: size budget, include order and clang-format no worse than scripts/style_baseline.json")
    return 0


# ---- the negative control -------------------------------------------------------
SELF_TEST_FILES = {
    # Clean: own header first, then <x.h>, <x>, "x"; formatted.
    "ckpt/clean.cc": '#include "ckpt/clean.h"\n\n#include <unistd.h>\n\n#include <string>\n\n'
                     '#include "ckpt/base/status.h"\n\nint Clean(int a) { return a + 1; }\n',
    # Debt recorded in the baseline: misformatted and an unsorted block.
    "ckpt/debt.cc": '#include <vector>\n#include <string>\n\nint  Debt( int a ){return a;}\n',
}


def self_test():
    """Each check must flag what breaks it and pass what does not."""
    ok = code_size.self_test() == 0
    exe, why = find_clang_format()
    with tempfile.TemporaryDirectory() as root:
        shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".clang-format"), root)
        for rel, text in SELF_TEST_FILES.items():
            os.makedirs(os.path.dirname(os.path.join(root, rel)), exist_ok=True)
            open(os.path.join(root, rel), "w").write(text)
        baseline = os.path.join(root, "baseline.json")
        write_baseline(root, baseline, exe, 2)
        base = load_baseline(baseline)
        clean, debt = base["files"]["ckpt/clean.cc"], base["files"]["ckpt/debt.cc"]
        recorded = (clean["include_order"], clean["clang_format"], debt["include_order"], debt["clang_format"])
        want = (0, 0, 1, 3) if exe else (0, None, 1, None)
        print(f"self-test {'ok' if recorded == want else 'FAILED'}: baseline counts {recorded}, want {want}")
        ok &= recorded == want
        cases = [  # (what, files to write, expected substrings of the messages ([] = clean))
            ("unchanged tree", {}, []),
            ("moved debt file", {"ckpt/moved/debt.cc": SELF_TEST_FILES["ckpt/debt.cc"]}, []),
            ("unsorted block in a new file", {"ckpt/new1.cc": '#include <vector>\n#include <map>\n'},
             ["ckpt/new1.cc:1: include block not sorted"]),
            ('"x" before <x>', {"ckpt/new2.cc": '#include "ckpt/a.h"\n\n#include <map>\n'},
             ['ckpt/new2.cc: <map> (<x>) after a "x" include']),
            ("debt file worse", {"ckpt/debt.cc": SELF_TEST_FILES["ckpt/debt.cc"] + "int  G( ){return 1;}\n"},
             ["ckpt/debt.cc: clang-format would change 4 lines, baseline 3"] if exe else []),
            ("misformatted new file", {"ckpt/new3.cc": "int  f( int a ){return a;}\n"},
             ["ckpt/new3.cc: clang-format would change 1 lines, baseline 0"] if exe else []),
        ]
        for what, writes, want in cases:
            with tempfile.TemporaryDirectory() as case_root:
                shutil.copytree(root, case_root, dirs_exist_ok=True)
                for rel, text in writes.items():
                    os.makedirs(os.path.dirname(os.path.join(case_root, rel)), exist_ok=True)
                    open(os.path.join(case_root, rel), "w").write(text)
                bad, _ = compare(case_root, base, exe, 2)
            good = all(any(w in b for b in bad) for w in want) and (bool(bad) == bool(want))
            print(f"self-test {'ok' if good else 'FAILED'}: {what}: {bad}")
            ok &= good
    if why:
        print(f"self-test: clang-format cases NOT run: {why}")
        return 77 if ok else 1
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--baseline", help=f"default: <root>/{BASELINE}")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--update-baseline", action="store_true", help="record the tree as it is now")
    ap.add_argument("--self-test", action="store_true", help="check the checks on made-up files")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    root = os.path.abspath(a.root)
    baseline = a.baseline or os.path.join(root, BASELINE)
    if a.update_baseline:
        exe, why = find_clang_format()
        if why:
            print(why)
            return 2
        write_baseline(root, baseline, exe, a.jobs)
        return 0
    return check(root, baseline, a.jobs)


if __name__ == "__main__":
    sys.exit(main())
