#!/usr/bin/env python3
"""Keeps the Level 8 text (seeds/level8/M1xx.md, L8-Xnn.md) in sync with measurements.

A measured number quoted in a question is written as VALUE<!--ev:NAME--> (or
VALUE<!--ev:nc.NAME-->, VALUE<!--ev:NAME:.2f-->; VALUE may be `backticked`
text). NAME is a key of that question's evidence numbers (nc.: of its negative
control). Each question also holds its evidence row between
<!-- evidence:begin --> and <!-- evidence:end --> (Chinese and English
headlines of the measurement and of the negative control), generated here.

A sentence that interprets measured values is generated from them too:
<!--evl:EXPR?TRUE TEXT|FALSE TEXT-->CURRENT TEXT<!--/evl--> where EXPR is NAME
(a boolean), or NAME OP NAME / NAME OP NUMBER / NAME OP NUMBER*NAME with OP one
of < <= > >=; the
check fails when CURRENT TEXT is not the branch the evidence selects (--write
regenerates it). In a table row that quotes a tagged value, every backticked
identifier with an underscore (`name_x`, `nc.name_x`), in an "工程验证 ... 引用"
scoring line every backticked identifier, and anywhere else every backticked
`nc.name`, must be a value the evidence still contains.

  evidence_check.py [--evidence F] [--seeds DIR]          check (CI): exit 1 on a mismatch
  evidence_check.py --write [--evidence F] [--seeds DIR]  regenerate values and rows from F
  evidence_check.py --drift OLD NEW                       compare two runs' numbers (timing-class values:
                                                          presence only, the machines differ)
  evidence_check.py --merge RUN INTO                      put RUN's scenarios (an evidence.json of a run of
                                                          some scenarios) into INTO, replacing same ids; each
                                                          merged one keeps RUN's generated_at

F defaults to seeds/level8/evidence/full.json: the evidence.json of the last
full-size run (`ckpt-lab scenario run --all --out DIR`, copied there; a scenario
merged in from a later run carries its own "generated_at", which its row shows).
Tolerance (stated here, used by the check and by --drift): timing-class values
(names ending in _s, _ms, _seconds, mb_per_s, ratio) may differ by a factor of
TIMING_FACTOR; every other value (counts, bytes, booleans, strings, fractions)
must match exactly as formatted, unless listed in VOLATILE (measured values
that legitimately vary run to run, e.g. how many steps fit into a delay under
load) - those are only checked for presence. A quoted NAME that the evidence
does not have is always an error, and so is a stale evidence row. The generated rows are compared only with
the committed file; a fresh run (`ckpt-lab scenario run --all --check-text`) is
compared through the tagged values.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from scenario_runner import Unmeasured, fmt_value, headline, id_order, nc_text  # noqa: E402

ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TIMING_FACTOR = 3.0
TIMING_RE = re.compile(r"(_s|_ms|_seconds|mb_per_s|ratio)$")
VOLATILE = {
    # M118: how many steps fit into the delay, and which of the two no-snapshot outcomes occurs
    # (later values with correct hashes, or a torn checkpoint), depend on scheduling.
    "M118": {"steps_before_read", "nc.steps_before_read", "overlap_min_wait_ms", "crash_fired", "crash_tmp_dirs",
             "nc.tensors_differing", "nc.tensors_compared", "nc.max_ulp", "nc.objects_differing", "nc.hash_mismatch",
             "nc.verify_ok", "nc.resume_refusal"},
    "M121": {"latency_min_s", "latency_max_s", "latency_max_root_s", "latency_max_other_s", "nc.seconds_until_killed",
             "nc.processes_killed"},
    "M111": {"nc.nobal_save_s", "bal_save_s"},
    "M117": {"nc.value_read"},
    # M115: what the surviving rank had written when its peer crashed depends on scheduling (the atomic
    # campaign's tmp leftovers; the in-place control's partial directories and how much of them is torn).
    "M115": {"tmp_leftover_dirs", "nc.partial_iter20_dirs", "nc.torn_data_dirs", "nc.inplace_torn_elements",
             "nc.inplace_torn_fraction", "nc.partial_files"},
    # M124: the nondeterministic path sums the embedding gradient in a random order: whether a rerun's loss
    # curve stays bitwise equal, and how far its state drifts, change from run to run (that is its point).
    "M124": {"nd_rerun_exact", "nd_rerun_state_max_rel", "nd_rerun_loss_rel", "nd_lr_loss_rel"},
    # L8-X06: which of the waiting ranks waited longest depends on scheduling (the straggler itself does not).
    "L8-X06": {"longest_wait_rank"},
    # L8-X07: the iteration at which the signal lands (and so what was saved, resumed, or lost without the
    # handler) depends on the step rate under load; steps lost WITH the handler (0) and retention are exact.
    "L8-X07": {"logged_at_signal", "saved_iteration", "summary_iteration", "resumed_from", "nc.rc",
             "nc.logged_at_signal", "nc.last_logged", "nc.newest_committed", "nc.steps_lost"},
}
TAG_RE = re.compile(r"(`[^`]*`|[-+]?[0-9][0-9,]*(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?|true|false|inf|nan)"
                    r"<!--ev:([A-Za-z0-9_.]+)(?::(\.[0-9][fe]))?-->")
LABEL_RE = re.compile(r"<!--evl:([^?]+)\?([^|]*)\|(.*?)-->(.*?)<!--/evl-->", re.S)
LABEL_EXPR_RE = re.compile(r"\s*([A-Za-z0-9_.]+)\s*(?:(<=|>=|<|>)\s*(?:([0-9.]+)\*)?([A-Za-z0-9_.]+)\s*)?")
FIELD_RE = re.compile(r"`((?:nc\.)?[a-z][a-z0-9_]*_[a-z0-9_]*)`")
CITE_RE = re.compile(r"`((?:nc\.)?[a-z][a-z0-9_]*)`")
NC_FIELD_RE = re.compile(r"`(nc\.[a-z][a-z0-9_]*)`")
SEED_LEVEL9_RE = re.compile(r"M(12[5-9]|13[0-9]|140)\.md")
ROW_RE = re.compile(r"<!-- evidence:begin -->.*?<!-- evidence:end -->", re.S)


def load(path):
    with open(path, encoding="utf-8") as f:
        j = json.load(f)
    return {s["id"]: s for s in j["scenarios"]}, j


def lookup(ev, name):
    table = ev.get("numbers", {})
    if name.startswith("nc."):
        table, name = ev.get("negative_control", {}).get("numbers", {}), name[3:]
    if name not in table:
        raise Unmeasured(f"'{name}' is not a measured value")
    return table[name]


def label_holds(ev, expr):
    """The truth of a label expression (NAME, or NAME OP NAME|NUMBER) under ev; raises Unmeasured."""
    m = LABEL_EXPR_RE.fullmatch(expr)
    if not m:
        raise Unmeasured(f"label expression '{expr}' (use NAME or NAME OP NAME|NUMBER|NUMBER*NAME)")
    a = lookup(ev, m.group(1))
    if not m.group(2):
        if not isinstance(a, bool):
            raise Unmeasured(f"label '{expr}': '{m.group(1)}' is not a boolean")
        return a
    rhs = m.group(4)
    b = float(rhs) if re.fullmatch(r"[-+]?[0-9]+(?:\.[0-9]+)?", rhs) else lookup(ev, rhs)
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b)):
        raise Unmeasured(f"label '{expr}' compares non-numbers")
    b = b * float(m.group(3)) if m.group(3) else b
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[m.group(2)]


SCENARIO_ID_RE = re.compile(r"M1[0-9]{2}|L8-X[0-9]{2}")


def prose_owner(line, pos, sid):
    """The scenario a prose `nc.x` at pos belongs to: the last id named before it in the line, else sid."""
    ids = SCENARIO_ID_RE.findall(line[:pos])
    return ids[-1] if ids else sid


def check_fields(path, ev, text, sid=None, scs=None):
    """Backticked evidence fields named in a table row that quotes measured values must still be measured;
    a prose `nc.x` is looked up in the scenario named last before it in its line ("M120 的 `nc.x`")."""
    problems = []
    for line in text.splitlines():
        if line.startswith("|") and "<!--ev:" in line:
            names = FIELD_RE.findall(line)
        elif "工程验证" in line and "引用" in line:  # a scoring point that cites this scenario's fields
            names = CITE_RE.findall(line)
        else:  # anywhere else, a `nc.name` can only mean a negative-control value
            for m in NC_FIELD_RE.finditer(line):
                owner = prose_owner(line, m.start(), sid)
                owner_ev = ev if owner == sid or scs is None else scs.get(owner, {}).get("evidence", {})
                try:
                    lookup(owner_ev, m.group(1))
                except Unmeasured:
                    problems.append(f"{path}: text cites `{m.group(1)}` of {owner}, which its evidence does not "
                                    f"contain: {line[:80]}")
            continue
        for name in names:
            try:
                lookup(ev, name)
            except Unmeasured:
                problems.append(f"{path}: row names `{name}`, which the evidence does not contain: {line[:80]}")
    return problems


def is_timing(name):
    return bool(TIMING_RE.search(name.split(".")[-1]))


def agree(sid, name, text_val, measured, spec):
    """(ok, why) for a quoted value against a measured one under the stated tolerance."""
    want = fmt_value(measured, spec)
    got = text_val.strip("`")
    if got == want or name in VOLATILE.get(sid, ()):
        return True, ""
    if is_timing(name) and isinstance(measured, (int, float)) and not isinstance(measured, bool):
        try:
            g = float(got.replace(",", ""))
        except ValueError:
            return False, f"'{got}' is not a number"
        m = float(measured)
        if m == g or (m > 0 and g > 0 and max(m / g, g / m) <= TIMING_FACTOR):
            return True, ""
        return False, f"text {got} vs measured {want} (timing tolerance: factor {TIMING_FACTOR})"
    return False, f"text {got} vs measured {want} (exact)"


def row(sid, sc, run_meta):
    ev = sc["evidence"]
    size = "缩减规模 / reduced" if ev.get("reduced", run_meta.get("reduced")) else "完整规模 / full size"
    return "\n".join([
        "<!-- evidence:begin -->",
        f"本机证据（{size}，{sc.get('generated_at', run_meta.get('generated_at', '?'))}，{run_meta.get('cores', '?')} 核，"
        f"{sc['wall_seconds']:.1f} s，"
        f"由 `scripts/harness/evidence_check.py --write` 从 seeds/level8/evidence/full.json 生成 / generated, do not edit）",
        "",
        "| | 中文 | English |",
        "|---|---|---|",
        f"| 测量 / measured | {headline(ev)} | {headline(ev, 'headline_en')} |",
        f"| 负对照 / negative control | {nc_text(ev)} | {nc_text(ev, 'headline_en')} |",
        "<!-- evidence:end -->"]).replace("|  |", "| |")


def check_file(path, sid, scs, meta, write, check_rows=True):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    problems = []
    sc = scs.get(sid)
    if sc is None or not isinstance(sc.get("evidence"), dict):
        return [f"{path}: no evidence for {sid} in the evidence file"], text
    ev = sc["evidence"]

    def fix(m):
        val, name, spec = m.group(1), m.group(2), m.group(3) or ""
        try:
            measured = lookup(ev, name)
        except Unmeasured as e:
            problems.append(f"{path}: {e}")
            return m.group(0)
        if write:
            new = fmt_value(measured, spec)
            return (f"`{new}`" if val.startswith("`") else new) + f"<!--ev:{name}{':' + spec if spec else ''}-->"
        ok, why = agree(sid, name, val, measured, spec)
        if not ok:
            problems.append(f"{path}: {name}: {why}")
        return m.group(0)

    new_text = TAG_RE.sub(fix, text)

    def label(m):
        expr, yes, no, cur = m.groups()
        try:
            want = yes if label_holds(ev, expr) else no
        except Unmeasured as e:
            problems.append(f"{path}: {e}")
            return m.group(0)
        if write:
            return f"<!--evl:{expr}?{yes}|{no}-->{want}<!--/evl-->"
        if cur != want:
            problems.append(f"{path}: label '{expr}' says '{cur}' but the evidence selects '{want}'")
        return m.group(0)

    new_text = LABEL_RE.sub(label, new_text)
    problems += check_fields(path, ev, new_text, sid, scs)
    want_row = row(sid, sc, meta)
    if not ROW_RE.search(new_text):
        problems.append(f"{path}: no <!-- evidence:begin --> ... <!-- evidence:end --> block")
    elif write:
        new_text = ROW_RE.sub(lambda _: want_row, new_text)
    elif check_rows and ROW_RE.search(new_text).group(0) != want_row:
        problems.append(f"{path}: evidence row differs from the evidence file (run --write after a new full run)")
    if not TAG_RE.search(new_text):
        problems.append(f"{path}: quotes no tagged measured value")
    return problems, new_text


def drift(old_path, new_path):
    old, _ = load(old_path)
    new, _ = load(new_path)
    problems = []
    for sid, o in old.items():
        n = new.get(sid)
        if n is None or not isinstance(n.get("evidence"), dict) or not isinstance(o.get("evidence"), dict):
            problems.append(f"{sid}: missing in {new_path}")
            continue
        for scope, pre in (("numbers", ""), ("negative_control", "nc.")):
            ot = o["evidence"].get(scope, {}) if scope == "numbers" else o["evidence"][scope].get("numbers", {})
            nt = n["evidence"].get(scope, {}) if scope == "numbers" else n["evidence"][scope].get("numbers", {})
            for k, v in ot.items():
                if k not in nt:
                    problems.append(f"{sid}: {pre}{k} no longer measured")
                    continue
                if is_timing(pre + k):
                    continue  # machines and load differ between runs: presence only
                ok, why = agree(sid, pre + k, fmt_value(nt[k]) if not isinstance(nt[k], (dict, list)) else "",
                                v, "")
                if not ok:
                    problems.append(f"{sid}: {pre}{k}: committed {fmt_value(v)} vs this run {fmt_value(nt[k])}")
    return problems


def merge(run_path, into_path):
    """Adds / replaces the scenarios of one run in a committed evidence file."""
    _, run = load(run_path)
    _, into = load(into_path)
    by_id = {sc["id"]: sc for sc in into["scenarios"]}
    for sc in run["scenarios"]:
        if bool(run.get("reduced")) != bool(into.get("reduced")):
            raise SystemExit(f"evidence_check: {run_path} and {into_path} are of different sizes")
        by_id[sc["id"]] = dict(sc, generated_at=run.get("generated_at", "?"))
    into["scenarios"] = [by_id[k] for k in sorted(by_id, key=id_order)]
    into["passed"] = sum(sc.get("runner_verdict") == "PASS" for sc in into["scenarios"])
    into["total_seconds"] = sum(sc.get("wall_seconds", 0.0) for sc in into["scenarios"])
    with open(into_path, "w", encoding="utf-8") as f:
        json.dump(into, f, ensure_ascii=False, indent=2)
        f.write("\n")
    return []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--evidence", default=os.path.join(ROOT, "seeds", "level8", "evidence", "full.json"))
    ap.add_argument("--seeds", default=os.path.join(ROOT, "seeds", "level8"))
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--drift", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--merge", nargs=2, metavar=("RUN", "INTO"))
    a = ap.parse_args(argv)
    if a.merge:
        problems = merge(*a.merge)
    elif a.drift:
        problems = drift(*a.drift)
    else:
        scs, meta = load(a.evidence)
        problems = []
        for name in sorted(os.listdir(a.seeds)):
            if SEED_LEVEL9_RE.fullmatch(name):
                problems.append(f"{os.path.join(a.seeds, name)}: M125-M140 are the seed's Level 9 questions; "
                                "number a supplementary Level 8 question L8-Xnn")
            m = re.fullmatch(r"(M[0-9]{3}|L8-X[0-9]{2})\.md", name)
            if not m:
                continue
            # rows are generated from the committed file; a fresh run (--check-text) is checked by its tags only
            p, text = check_file(os.path.join(a.seeds, name), m.group(1), scs, meta, a.write,
                                 check_rows=os.path.abspath(a.evidence) == os.path.abspath(ap.get_default("evidence")))
            problems += p
            if a.write:
                with open(os.path.join(a.seeds, name), "w", encoding="utf-8") as f:
                    f.write(text)
    for p in problems:
        print("evidence_check:", p, file=sys.stderr)
    print(f"evidence_check: {'OK' if not problems else f'{len(problems)} problem(s)'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
