#!/usr/bin/env python3
"""Layering check: no source includes a header of a layer above its own.

The layer table is the one in docs/DESIGN.md, section "Layers": rows
`| <layer> | <folder> | <targets> | <what> |`. This script
  1. assigns every C/C++ source under a listed folder to its row (longest
     folder prefix) and fails on sources in folders the table does not list
     (under ckpt/, reshard/, faults/, cli/, tests/, bench/, examples/, python/);
  2. resolves every `#include "..."` (the including file's folder, the
     repository root, then tests/ and ckpt/h5plugin, the extra include roots
     the build uses) and fails when the header's row has a layer number not
     below the includer's (same folder is always fine);
  3. with --targets <build>/layering/targets.txt (written by the top-level
     CMakeLists.txt), checks that every target the table names exists and
     links only targets of lower layers (or of its own row);
  4. product -> harness never: the section's "Product folders:" and "Harness
     folders:" lines put every row on one side; a product source that
     includes a harness header, or a product target that links a harness
     target, fails whatever the layer numbers say (and so does a row on
     neither side or on both).
Exit 0 when clean, 1 with one line per violation, 2 on bad input.
--self-test builds a small tree with an upward include, an unlisted folder,
an upward link and a product -> harness include and link, and checks that
each is reported (the negative control).
"""
import argparse
import fnmatch
import os
import re
import sys
import tempfile

SOURCE_EXT = (".c", ".cc", ".cpp", ".h", ".hpp", ".cu", ".cuh")
CHECKED_TOPS = ("ckpt", "reshard", "faults", "cli", "harness", "tests", "bench", "examples", "python")
EXTRA_INCLUDE_ROOTS = ("tests", "ckpt/h5plugin")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
ROW_RE = re.compile(r"^\|\s*(\d+)\s*\|\s*`?([\w./-]+)`?\s*\|([^|]*)\|")
SIDE_RE = re.compile(r"^(Product|Harness) folders:(.*)$")


class Row:
    def __init__(self, layer, folder, targets):
        self.layer, self.folder, self.targets = layer, folder, targets
        self.side = None  # "product" or "harness" (the section's side lines)

    def __repr__(self):
        return f"{self.folder} (layer {self.layer})"


def parse_table(design_md):
    """Rows of the table in the "## Layers" section of docs/DESIGN.md, each
    with its side from the section's "Product folders:" / "Harness folders:"
    lines (folders in backticks; a row takes the side of its longest listed
    prefix)."""
    rows, sides, in_section = [], {}, False
    with open(design_md, encoding="utf-8") as f:
        for line in f:
            if line.startswith("## "):
                in_section = line.strip() == "## Layers"
                continue
            side = SIDE_RE.match(line) if in_section else None
            if side:
                for folder in re.findall(r"`([\w./-]+)`", side.group(2)):
                    sides[folder.rstrip("/")] = side.group(1).lower()
            m = ROW_RE.match(line) if in_section else None
            if m:
                targets = [t.strip(" `") for t in m.group(3).split(",") if t.strip(" `-")]
                rows.append(Row(int(m.group(1)), m.group(2).rstrip("/"), targets))
    if not rows:
        raise ValueError(f"{design_md}: no layer table rows under '## Layers'")
    for r in rows:
        best = max((f for f in sides if r.folder == f or r.folder.startswith(f + "/")), key=len, default=None)
        r.side = sides.get(best)
    return rows


def side_errors(rows):
    return [f"{r}: on neither side: list its folder under 'Product folders:' or 'Harness folders:' "
            "in the Layers section of docs/DESIGN.md" for r in rows if r.side is None]


def product_to_harness(mine, theirs):
    return mine.side == "product" and theirs.side == "harness"


def row_of(path, rows):
    best = None
    for r in rows:
        if path == r.folder or path.startswith(r.folder + "/"):
            if best is None or len(r.folder) > len(best.folder):
                best = r
    return best


def sources(root):
    for top in CHECKED_TOPS:
        base = os.path.join(root, top)
        for dirpath, dirnames, filenames in os.walk(base):
            # Skip build trees and hidden folders (a build dir holds CMakeCache.txt).
            dirnames[:] = [d for d in dirnames if not d.startswith(".") and
                           not os.path.exists(os.path.join(dirpath, d, "CMakeCache.txt"))]
            for name in filenames:
                if name.endswith(SOURCE_EXT):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def resolve(root, src, inc):
    for base in [os.path.dirname(src), ""] + list(EXTRA_INCLUDE_ROOTS):
        cand = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(os.path.join(root, cand)):
            return cand
    return None  # a system or third-party header


def check_includes(root, rows):
    errors = []
    for src in sorted(sources(root)):
        mine = row_of(src, rows)
        if mine is None:
            errors.append(f"{src}: folder not in the Layers table of docs/DESIGN.md")
            continue
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = INCLUDE_RE.match(line)
                hdr = resolve(root, src, m.group(1)) if m else None
                if hdr is None:
                    continue
                theirs = row_of(hdr, rows)
                if theirs is None or theirs is mine:
                    continue
                if product_to_harness(mine, theirs):
                    errors.append(f"{src}:{lineno}: includes {hdr}: product {mine} -> harness {theirs}")
                elif theirs.layer >= mine.layer:
                    errors.append(f"{src}:{lineno}: includes {hdr}: {theirs} is not below {mine}")
    return errors


def parse_targets(path):
    """Lines `<target>\t<link item>;<link item>...` from the CMake dump."""
    links = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                name, _, items = line.rstrip("\n").partition("\t")
                links[name] = re.findall(r"[A-Za-z_][\w:.+-]*", items)
    return links


def target_row(name, rows):
    for r in rows:
        if any(fnmatch.fnmatchcase(name, pat) for pat in r.targets):
            return r
    return None


def check_links(root, rows, targets_file):
    errors, links = [], parse_targets(targets_file)
    for r in rows:
        if not os.path.isdir(os.path.join(root, r.folder)):
            continue
        for pat in r.targets:
            if not any(fnmatch.fnmatchcase(t, pat) for t in links):
                errors.append(f"{r}: target {pat} named in docs/DESIGN.md does not exist in the build")
    for name, items in sorted(links.items()):
        mine = target_row(name, rows)
        if mine is None:
            continue
        for item in items:
            theirs = target_row(item, rows)
            if theirs is not None and product_to_harness(mine, theirs):
                errors.append(f"target {name} (product {mine}) links {item} (harness {theirs})")
            elif theirs is not None and theirs is not mine and theirs.layer >= mine.layer:
                errors.append(f"target {name} ({mine}) links {item} ({theirs}): not a lower layer")
    return errors


def run(root, design_md, targets_file):
    rows = parse_table(design_md)
    errors = side_errors(rows) + check_includes(root, rows)
    if targets_file:
        errors += check_links(root, rows, targets_file)
    return rows, errors


def self_test():
    """Negative control: each kind of violation must be reported."""
    with tempfile.TemporaryDirectory() as d:
        def write(rel, text):
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w", encoding="utf-8") as f:
                f.write(text)
        # harness (layer 2, harness side) sits below the product's cli (layer 3)
        # here, so only the side rule catches cli -> harness.
        write("docs/DESIGN.md", "## Layers\nProduct folders: `ckpt`, `cli`.\nHarness folders: `harness`.\n"
              "| layer | folder | targets | what |\n|---|---|---|---|\n"
              "| 0 | ckpt/base | ckpt_base | low |\n| 1 | ckpt/format | ckpt_format | high |\n"
              "| 2 | harness | ckpt_harness | negative controls |\n| 3 | cli | ckpt | the command |\n"
              "| 4 | tools | ckpt_tools | on neither side |\n## Next\n")
        write("ckpt/base/a.h", '#include "ckpt/format/b.h"\n')  # upward
        write("ckpt/format/b.h", '#include "ckpt/base/a.h"\n#include <vector>\n')  # fine
        write("ckpt/other/c.cc", "int c;\n")  # unlisted folder
        write("harness/h.h", '#include "ckpt/base/a.h"\n')  # fine: harness -> product
        write("cli/m.cc", '#include "ckpt/format/b.h"\n#include "harness/h.h"\n')  # product -> harness
        write("targets.txt", "ckpt_base\tckpt_format;Threads::Threads\nckpt_format\tckpt_base\n"
              "ckpt_harness\tckpt_format\nckpt\tckpt_format;ckpt_harness\nckpt_tools\t\n")
        _, errors = run(d, os.path.join(d, "docs/DESIGN.md"), os.path.join(d, "targets.txt"))
        expected = ["ckpt/base/a.h:1: includes ckpt/format/b.h", "ckpt/other/c.cc: folder not in",
                    "target ckpt_base (ckpt/base (layer 0)) links ckpt_format",
                    "cli/m.cc:2: includes harness/h.h: product cli (layer 3) -> harness",
                    "target ckpt (product cli (layer 3)) links ckpt_harness (harness",
                    "tools (layer 4): on neither side"]
        missing = [e for e in expected if not any(x.startswith(e) for x in errors)]
        if missing or len(errors) != len(expected):
            print("self-test FAILED; reported:", *errors, "expected:", *expected, sep="\n  ")
            return 1
    print("self-test ok: upward include, unlisted folder, upward link, product -> harness include and link, "
          "and a row on neither side are reported")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--targets", help="<build>/layering/targets.txt written by CMake")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    root = os.path.abspath(args.root)
    try:
        rows, errors = run(root, os.path.join(root, "docs/DESIGN.md"), args.targets)
    except (OSError, ValueError) as e:
        print(f"layering: {e}", file=sys.stderr)
        return 2
    for e in errors:
        print(e)
    if errors:
        print(f"layering: {len(errors)} violation(s) of the Layers table in docs/DESIGN.md")
        return 1
    print(f"layering ok: {len(rows)} rows, every include and link goes down, none from product to harness")
    return 0


if __name__ == "__main__":
    sys.exit(main())
