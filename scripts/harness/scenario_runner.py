#!/usr/bin/env python3
"""The Level 8 question bank's evidence runner (seeds/level8/<id>.md); `ckpt
scenario` is a thin wrapper that executes this file with --ckpt <its binary>.

  scenario_runner.py --ckpt BIN list [--json] [--scripts DIR]
  scenario_runner.py --ckpt BIN run <id>... | --all [--out DIR] [--reduced] [--json] [--keep]
                     [--scripts DIR] [--mpirun PREFIX] [--timeout-s S] [--budget-s S] [--check-text]

A scenario is the Python script DIR/<id>.py (id = M + three digits, or L8-X + two
digits for the supplementary questions; header
lines "# title: ..." and "# question: ..."), run by the shared launcher
(launcher.py) as a job with a deadline (--timeout-s; every process of the job
is killed when it expires) and this environment:
  CKPT, MPIRUN (prefix before "-np N"), SCRATCH (an empty directory of its own,
  removed afterwards unless --keep or it failed), REDUCED (1 under --reduced),
  SCENARIO_ID, OMPI_ALLOW_RUN_AS_ROOT*.
Its last non-empty stdout line is the evidence object
  {"id", "title", "setup", "numbers": {...}, "verdict": "PASS"|"FAIL", "claim",
   "checks": [{"name", "ok"}], "negative_control": {"what", "numbers", "shows_failure",
   optional "headline", "headline_en"}, optional "headline", "headline_en", "gaps": [text]}.
A scenario passes iff it exits 0 within the limit and the budget, the object
is well formed and names the same id, verdict is PASS, no check is false, the
negative control still shows the failure, and every {name} / {nc.name} /
{name:.Nf} cited in a headline or claim is a measured value.

--out DIR (default ./scenario-evidence, always written with --all) receives
evidence.md (experiment | key numbers (中文) | key numbers (English) | claim,
then the negative controls), evidence.json and logs/<id>.{out,err}.
--check-text also checks seeds/level8 against this run's evidence
(evidence_check.py; only meaningful at the size the text quotes).
Exit: 0 all passed; 1 a scenario failed or its control stopped showing the
failure; 2 usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import launcher  # noqa: E402

DEFAULT_MPIRUN = "mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader"
# M + three digits: the seed's questions (Level 8 is M111-M124; the seed's M125-M140 are Level 9);
# L8-X + two digits: the bank's own supplementary Level 8 questions, numbered outside the seed's range.
ID_RE = re.compile(r"M[0-9]{3}|L8-X[0-9]{2}")
REF_RE = re.compile(r"\{([A-Za-z0-9_.]+)(?::([^}]*))?\}")


def id_order(sid: str):
    """The seed's questions (M...) first, then the supplementary ones (L8-X...)."""
    return (not sid.startswith("M"), sid)


class Unmeasured(Exception):
    pass


def fmt_value(v, spec: str = "") -> str:
    """A measured value as text: integers with thousands separators, floats from
    1000 up rounded the same way, smaller ones with 3 significant digits (always
    a decimal point), unless spec is .Nf / .Ne."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    if not isinstance(v, (int, float)):
        raise Unmeasured(f"not a number, string or bool: {json.dumps(v)}")
    if spec:
        if not re.fullmatch(r"\.[0-9][fe]", spec):
            raise Unmeasured(f"format spec '{spec}' (use .Nf or .Ne)")
        return format(float(v), spec)
    if isinstance(v, int):
        return f"{v:,}"
    if v != v or v in (float("inf"), float("-inf")):
        return str(v)
    if 1000 <= abs(v) < 1e15:
        return f"{round(v):,}"
    s = f"{v:.3g}"
    return s if ("." in s or "e" in s) else s + ".0"


def substitute(text: str, ev: dict) -> str:
    """Replaces {name[:spec]} / {nc.name[:spec]} by measured values; raises Unmeasured."""
    def one(m):
        name, spec = m.group(1), m.group(2) or ""
        table = ev.get("numbers", {})
        if name.startswith("nc."):
            table, name = ev.get("negative_control", {}).get("numbers", {}), name[3:]
        if not isinstance(table, dict) or name not in table:
            raise Unmeasured(f"'{m.group(0)}' names no measured value")
        return fmt_value(table[name], spec)
    return REF_RE.sub(one, text)


def text_of(ev, key, fallback=""):
    if not isinstance(ev, dict) or not isinstance(ev.get(key), str):
        return fallback
    try:
        return substitute(ev[key], ev)
    except Unmeasured:
        return ev[key]


def judge(sid: str, ev) -> list[str]:
    """Problems with an evidence object; empty when it passes."""
    if not isinstance(ev, dict):
        return ["evidence is not a JSON object"]
    p = [f"field '{k}' missing or not a string" for k in ("id", "title", "setup", "verdict", "claim")
         if not isinstance(ev.get(k), str)]
    if not isinstance(ev.get("numbers"), dict) or not ev["numbers"]:
        p.append("field 'numbers' missing or empty")
    nc = ev.get("negative_control")
    if not (isinstance(nc, dict) and "what" in nc and isinstance(nc.get("numbers"), dict)
            and isinstance(nc.get("shows_failure"), bool)):
        p.append("negative_control must have what, numbers and a boolean shows_failure")
    elif not nc["shows_failure"]:
        p.append("negative control no longer shows the failure: " + str(nc.get("what", "")))
    if p:
        return p
    if ev["id"] != sid:
        p.append(f"evidence names id {json.dumps(ev['id'])}")
    if ev["verdict"] != "PASS":
        p.append("verdict " + ev["verdict"])
    p += ["check failed: " + str(c.get("name", c)) for c in ev.get("checks", [])
          if isinstance(c, dict) and not c.get("ok", False)]
    texts = [(k, ev.get(k)) for k in ("headline", "headline_en", "claim")]
    texts += [("negative_control." + k, nc.get(k)) for k in ("headline", "headline_en", "what")]
    for k, t in texts:
        if isinstance(t, str):
            try:
                substitute(t, ev)
            except Unmeasured as e:
                p.append(f"{k}: {e}")
    return p


def read_header(script: str) -> dict:
    sc = {"id": os.path.basename(script)[:-3], "title": "", "question": "", "script": script}
    with open(script, encoding="utf-8") as f:
        for _, line in zip(range(30), f):
            for k in ("title", "question"):
                if line.startswith(f"# {k}:"):
                    sc[k] = line.split(":", 1)[1].strip()
    return sc


def list_scenarios(d: str) -> list[dict]:
    return sorted((read_header(os.path.join(d, n)) for n in os.listdir(d)
                   if n.endswith(".py") and ID_RE.fullmatch(n[:-3])), key=lambda s: id_order(s["id"]))


def find_scripts_dir(flag: str | None) -> str:
    if flag:
        if os.path.isdir(flag):
            return os.path.abspath(flag)
        raise SystemExit(f"ckpt-lab scenario: --scripts '{flag}' is not a directory")
    cands = [os.environ.get("CKPT_SCENARIO_DIR"), os.path.join(HERE, "..", "scenarios")]
    for c in cands:
        if c and os.path.isfile(os.path.join(c, "scenlib.py")):
            return os.path.abspath(c)
    raise SystemExit(f"ckpt-lab scenario: no scenario directory (with scenlib.py) among {cands}; pass --scripts DIR")


def last_line(text: str) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def run_one(sc: dict, a, scripts: str, out_dir: str) -> dict:
    o = {"sc": sc, "evidence": None, "problems": [], "seconds": 0.0, "exit_code": -1}
    scratch, logs = os.path.join(out_dir, "scratch", sc["id"]), os.path.join(out_dir, "logs")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    os.makedirs(logs, exist_ok=True)
    env = dict(os.environ, CKPT=a.ckpt, MPIRUN=a.mpirun, SCRATCH=scratch, REDUCED="1" if a.reduced else "0",
               SCENARIO_ID=sc["id"], OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONDONTWRITEBYTECODE="1")
    out_log, err_log = os.path.join(logs, sc["id"] + ".out"), os.path.join(logs, sc["id"] + ".err")
    r = launcher.run_job([sys.executable, sc["script"]], a.timeout_s, stdout=out_log, stderr=err_log, env=env,
                         cwd=scripts)
    o["seconds"], o["exit_code"] = r.seconds, r.rc
    try:
        with open(out_log, encoding="utf-8", errors="replace") as f:
            o["evidence"] = json.loads(last_line(f.read()))
    except ValueError:
        o["evidence"] = None
    if r.timed_out:
        o["problems"].append(f"killed after the {a.timeout_s:g} s limit ({r.killed} processes)")
    elif r.rc != 0:
        o["problems"].append(f"script exited {r.rc}")
    if o["evidence"] is None:
        o["problems"].append("no evidence JSON on the last stdout line")
    else:
        o["problems"] += judge(sc["id"], o["evidence"])
    if o["seconds"] > a.budget_s:
        o["problems"].append(f"took {o['seconds']:.0f} s, over the {a.budget_s:g} s budget")
    if o["problems"]:
        with open(err_log, encoding="utf-8", errors="replace") as f:
            tail = "\n".join(f.read().splitlines()[-15:])
        print(f"---- {sc['id']} failed; stderr tail ({err_log}):\n{tail}", file=sys.stderr)
    elif not a.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    return o


def all_numbers(nums) -> str:
    return ", ".join(f"{k}={fmt_value(v) if isinstance(v, (int, float, str, bool)) else json.dumps(v)}"
                     for k, v in (nums or {}).items())


def headline(ev, key="headline") -> str:
    if isinstance(ev, dict) and key in ev:
        return text_of(ev, key)
    return all_numbers(ev.get("numbers")) if isinstance(ev, dict) and key == "headline" else ""


def nc_text(ev, key="headline") -> str:
    if not isinstance(ev, dict) or "negative_control" not in ev:
        return ""
    nc = ev["negative_control"]
    what = text_of({**ev, "what": nc.get("what", "")}, "what") if key == "headline" else ""
    if isinstance(nc.get(key), str):
        try:
            nums = substitute(nc[key], ev)
        except Unmeasured:
            nums = nc[key]
    elif key == "headline":
        nums = all_numbers(nc.get("numbers"))
    else:
        return ""
    return f"{what}: {nums}" if what else nums


def cell(s: str) -> str:
    return s.replace("|", "/").replace("\n", " ")


def write_evidence(d: str, outs: list, a, total: float) -> None:
    passed = sum(not o["problems"] for o in outs)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    size = "缩减规模（CI） / reduced (CI) size" if a.reduced else "完整规模 / full size"
    md = [f"# Level 8 本机证据 / local evidence (`ckpt-lab scenario run{' --all' if a.all else ''}"
          f"{' --reduced' if a.reduced else ''}`)\n",
          f"生成于 {now}，{os.cpu_count()} 核，{size}，{passed}/{len(outs)} 个场景通过，总耗时 {total:.1f} s。"
          "表中每个数字都由本次运行测得（同一数据见 evidence.json）；题目见 seeds/level8/。\n",
          f"Generated {now} on {os.cpu_count()} cores, {passed}/{len(outs)} scenarios passed in {total:.1f} s. "
          "Every number below was measured by this run (same data in evidence.json).\n",
          "| 实验 / experiment | 核心数字 | key numbers (English) | 可支持的回答 / claim |", "|---|---|---|---|"]
    for o in outs:
        ev = o["evidence"]
        exp = o["sc"]["id"] + " " + text_of(ev, "title", o["sc"]["title"])
        if isinstance(ev, dict) and "setup" in ev:
            exp += "（" + text_of(ev, "setup") + "）"
        nums, en = headline(ev), headline(ev, "headline_en")
        if o["problems"]:
            nums = "**未通过 / FAILED**: " + o["problems"][0] + ("; " + nums if nums else "")
        md.append(f"| {cell(exp)} | {cell(nums)} | {cell(en)} | {cell(text_of(ev, 'claim'))} |")
    gaps = [(o["sc"]["id"], g) for o in outs if isinstance(o["evidence"], dict) for g in o["evidence"].get("gaps", [])]
    if gaps:
        md += ["", "## 已知缺口 / known gaps（本次测得，未计入判定 / measured, not judged）", ""]
        md += [f"- {sid}：{cell(str(g))}" for sid, g in gaps]
    md += ["", "## 负对照 / negative controls（去掉机制后会出什么错 / what goes wrong without the mechanism）", "",
           "| 题号 / id | 负对照与数字 | negative control (English) | 仍显示失败 / still fails | 耗时 / wall |",
           "|---|---|---|---|---|"]
    for o in outs:
        ev = o["evidence"]
        shows = isinstance(ev, dict) and ev.get("negative_control", {}).get("shows_failure", False)
        md.append(f"| {o['sc']['id']} | {cell(nc_text(ev))} | {cell(nc_text(ev, 'headline_en'))} | "
                  f"{'是 / yes' if shows else '**否 / NO**'} | {o['seconds']:.1f} s |")
    j = {"generated_at": now, "cores": os.cpu_count(), "reduced": a.reduced, "total_seconds": total, "passed": passed,
         "scenarios": [{"id": o["sc"]["id"], "question": o["sc"]["question"],
                        "runner_verdict": "FAIL" if o["problems"] else "PASS", "problems": o["problems"],
                        "wall_seconds": o["seconds"], "exit_code": o["exit_code"], "evidence": o["evidence"]}
                       for o in outs]}
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "evidence.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(d, "evidence.json"), "w", encoding="utf-8") as f:
        json.dump(j, f, ensure_ascii=False, indent=2)
        f.write("\n")


def cmd_list(a) -> int:
    scs = list_scenarios(find_scripts_dir(a.scripts))
    if a.json:
        print(json.dumps(scs, ensure_ascii=False, indent=2))
    else:
        for s in scs:
            print(f"{s['id']}  {s['title']}  ({s['question']})")
    return 0


def print_outcome(o) -> None:
    ev = o["evidence"]
    print(f"{o['sc']['id']:<5} {'FAIL' if o['problems'] else 'PASS':<4} {o['seconds']:5.1f} s  {headline(ev)}")
    en = headline(ev, "headline_en")
    if en:
        print(f"      {en}")
    shows = isinstance(ev, dict) and ev.get("negative_control", {}).get("shows_failure", False)
    print(f"      negative control ({'shows the failure' if shows else 'DOES NOT show the failure'}): {nc_text(ev)}")
    for p in o["problems"]:
        print(f"      problem: {p}")
    for g in (ev or {}).get("gaps", []) if isinstance(ev, dict) else []:
        print(f"      gap (not judged): {g}")
    sys.stdout.flush()


def cmd_run(a) -> int:
    scripts = find_scripts_dir(a.scripts)
    all_ = list_scenarios(scripts)
    if a.all:
        chosen = all_
    else:
        by_id = {s["id"]: s for s in all_}
        unknown = [i for i in a.ids if i not in by_id]
        if unknown:
            print(f"ckpt-lab scenario: unknown scenario '{unknown[0]}' (see ckpt-lab scenario list)", file=sys.stderr)
            return 2
        chosen = [by_id[i] for i in a.ids]
    if not chosen:
        print("ckpt-lab scenario run: name scenarios or pass --all", file=sys.stderr)
        return 2
    a.mpirun = a.mpirun or os.environ.get("MPIRUN") or DEFAULT_MPIRUN
    out_dir = os.path.abspath(a.out or "scenario-evidence")
    outs, t0 = [], time.monotonic()
    for sc in chosen:
        if not a.json:
            print(f"{sc['id']} {sc['title']} ...", file=sys.stderr, flush=True)
        outs.append(run_one(sc, a, scripts, out_dir))
        if not a.json:
            print_outcome(outs[-1])
    total = time.monotonic() - t0
    passed = sum(not o["problems"] for o in outs)
    if a.all or a.out:
        write_evidence(out_dir, outs, a, total)
        if not a.json:
            print(f"evidence: {out_dir}/evidence.md, {out_dir}/evidence.json")
    rc = 0 if passed == len(outs) else 1
    if a.check_text:
        import evidence_check
        rc = max(rc, evidence_check.main(["--evidence", os.path.join(out_dir, "evidence.json")]))
    if a.json:
        print(json.dumps([{"id": o["sc"]["id"], "runner_verdict": "FAIL" if o["problems"] else "PASS",
                           "problems": o["problems"], "wall_seconds": o["seconds"], "evidence": o["evidence"]}
                          for o in outs], ensure_ascii=False))
    else:
        print(f"{passed}/{len(outs)} scenarios passed in {total:.1f} s")
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="ckpt-lab scenario", description="Level 8 question-bank scenarios: measured "
                                 "evidence with negative controls")
    ap.add_argument("--ckpt", default=os.environ.get("CKPT"), help="the ckpt-lab binary the scenarios run (the product commands + harness switches)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("list", help="list the scenarios (scripts/scenarios/<id>.py)")
    ls.add_argument("--json", action="store_true")
    ls.add_argument("--scripts")
    run = sub.add_parser("run", help="run scenarios; print their evidence; --all also writes evidence.md/.json")
    run.add_argument("ids", nargs="*")
    run.add_argument("--all", action="store_true")
    run.add_argument("--out")
    run.add_argument("--reduced", action="store_true", help="CI size (REDUCED=1)")
    run.add_argument("--json", action="store_true")
    run.add_argument("--keep", action="store_true", help="keep every scratch directory")
    run.add_argument("--scripts")
    run.add_argument("--mpirun")
    run.add_argument("--timeout-s", type=float, default=180.0, help="kill a scenario (all its processes) after this")
    run.add_argument("--budget-s", type=float, default=60.0, help="a scenario slower than this fails")
    run.add_argument("--check-text", action="store_true", help="also check seeds/level8 against this evidence")
    a = ap.parse_args(argv)
    if a.cmd == "list":
        return cmd_list(a)
    if not a.ckpt or not os.access(a.ckpt, os.X_OK):
        print("ckpt-lab scenario: --ckpt BIN (the ckpt-lab binary) is required", file=sys.stderr)
        return 2
    a.ckpt = os.path.abspath(a.ckpt)
    return cmd_run(a)


if __name__ == "__main__":
    sys.exit(main())
