#!/usr/bin/env python3
"""Size rules (docs/DESIGN.md "Size rules"): no file under cli/ over 200 lines,
no function over 60 lines outside tests. Prints the offenders; exit 1 if there
are any (--report: always exit 0). ctest runs it on the tree (code_size) and
--self-test on a made-up tree that breaks both rules (code_size_self_test).

Functions are found by brace matching on comment- and string-stripped C/C++:
a '{' whose preceding declaration text has a parameter list and is not a
class/struct/namespace/enum/initializer opens a function body; its length is
the lines from the signature's first line to the closing '}'."""
import argparse
import os
import re
import sys
import tempfile

SRC_DIRS = ["ckpt", "reshard", "faults", "cli", "harness", "bench", "examples"]
EXTS = (".cc", ".h", ".c", ".cpp", ".hpp")
CONTAINER = re.compile(r"\b(namespace|class|struct|enum|union)\b[^()]*$|\bextern\s+\"C\"\s*$")


def strip(text):
    """Blanks comments, string and char literals (keeps newlines)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif c == 'R' and text.startswith('R"', i):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = text.find(")" + m.group(1) + '"', i)
            end = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(c + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """(name, first line, lines) of every function body in `path`."""
    text = strip(open(path, encoding="utf-8", errors="replace").read())
    found, stack, decl_start, i = [], [], 0, 0
    line_of = lambda pos: text.count("\n", 0, pos) + 1
    while i < len(text):
        c = text[i]
        if c == "{":
            decl = text[decl_start:i]
            in_function = any(kind == "fn" for kind, _, _ in stack)
            is_fn = (not in_function and "(" in decl and not CONTAINER.search(decl.strip())
                     and not decl.rstrip().endswith("=") and not re.search(r"=\s*$", decl))
            if is_fn:
                first = decl_start + len(decl) - len(decl.lstrip())
                m = re.search(r"([~\w:]+)\s*\(", decl)
                stack.append(("fn", first, m.group(1) if m else "?"))
            else:
                stack.append(("block", i, ""))
            decl_start = i + 1
        elif c == "}":
            if stack:
                kind, start, name = stack.pop()
                if kind == "fn":
                    found.append((name, line_of(start), line_of(i) - line_of(start) + 1))
            decl_start = i + 1
        elif c == ";":
            decl_start = i + 1
        elif c == "#" and (i == 0 or text[i - 1] == "\n"):
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
            decl_start = i
            continue
        i += 1
    return found


def offenders(root, max_function, max_cli_file):
    """([(lines, cli file)], [(lines, where, function)]) over the rules' limits."""
    bad_files, bad_fns = [], []
    for d in SRC_DIRS:
        for dirpath, _, names in os.walk(os.path.join(root, d)):
            for name in sorted(names):
                if not name.endswith(EXTS):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                lines = sum(1 for _ in open(path, encoding="utf-8", errors="replace"))
                if rel.startswith("cli/") and lines > max_cli_file:
                    bad_files.append((lines, rel))
                for fn, first, n in functions(path):
                    if n > max_function:
                        bad_fns.append((n, f"{rel}:{first}", fn))
    return bad_files, bad_fns


def self_test():
    """A tree with a 201-line cli/ file and a 61-line function (and files just
    within the limits) must be flagged exactly there."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "cli"))
        os.makedirs(os.path.join(root, "ckpt"))
        body = lambda n: "int f(int a) {\n" + "  a += 1;\n" * (n - 2) + "  return a; }\n"
        open(os.path.join(root, "cli", "big.cc"), "w").write("// x\n" * 201)
        open(os.path.join(root, "cli", "ok.cc"), "w").write("// x\n" * 200)
        open(os.path.join(root, "ckpt", "long.cc"), "w").write(body(61).replace("f(", "too_long("))
        open(os.path.join(root, "ckpt", "fits.cc"), "w").write(body(60))
        files, fns = offenders(root, 60, 200)
    ok = files == [(201, "cli/big.cc")] and [(n, fn) for n, _, fn in fns] == [(61, "too_long")]
    print(f"self-test: {'ok' if ok else 'FAILED'}: files {files}, functions {fns}")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--max-function", type=int, default=60)
    ap.add_argument("--max-cli-file", type=int, default=200)
    ap.add_argument("--report", action="store_true", help="list only, exit 0")
    ap.add_argument("--self-test", action="store_true", help="check the checker on a made-up tree")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    bad_files, bad_fns = offenders(os.path.abspath(a.root), a.max_function, a.max_cli_file)
    print(f"files under cli/ over {a.max_cli_file} lines: {len(bad_files)}")
    for n, rel in sorted(bad_files, reverse=True):
        print(f"  {n:5d}  {rel}")
    print(f"functions over {a.max_function} lines outside tests: {len(bad_fns)}")
    for n, where, fn in sorted(bad_fns, reverse=True):
        print(f"  {n:5d}  {where}  {fn}")
    return 0 if a.report or not (bad_files or bad_fns) else 1


if __name__ == "__main__":
    sys.exit(main())
