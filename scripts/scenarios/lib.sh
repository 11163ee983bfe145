# shellcheck shell=bash
# Shared helpers of the Level 8 scenarios (scripts/scenarios/M1xx.sh), sourced
# by every script. `ckpt scenario run` sets the environment:
#   CKPT (the binary), MPIRUN (prefix before -np), SCRATCH (empty dir of this
#   scenario), REDUCED (1: CI size), SCENARIO_ID, PYTHON (/usr/bin/python3).
# Contract of a scenario script: everything it measures comes from the ckpt
# commands it runs in this invocation; logs go to stderr; the LAST stdout line
# is the evidence JSON (built with `emit` inside a `py` block). The negative
# control's shows_failure is computed from what the control measured, never
# written as a constant.
set -euo pipefail
: "${CKPT:?run through ckpt scenario run}" "${MPIRUN:?}" "${SCRATCH:?}" "${SCENARIO_ID:?}"
PY=${PYTHON:-/usr/bin/python3}
REDUCED=${REDUCED:-0}
export SCRATCH REDUCED SCENARIO_ID

# The GPT model of a scenario: a ~160 MB bf16 GQA/SwiGLU model at full size
# (16000-token vocab, 4 layers, hidden 1024), the 0.9 MB "tiny" preset under
# REDUCED. `model [k=v,...]` prints the --model spec with extra overrides.
FULL_MODEL=demo:num_layers=4,hidden=1024,ffn_hidden=2816,num_heads=16,num_query_groups=8,vocab_size=16000
model() {
  local base=$FULL_MODEL
  ((REDUCED)) && base=tiny
  if [[ -z ${1:-} ]]; then echo "$base"; elif [[ $base == *:* ]]; then echo "$base,$1"; else echo "$base:$1"; fi
}

log() { printf '[%s] %s\n' "$SCENARIO_ID" "$*" >&2; }

# World size of a layout spec: tp*cp*dp*pp.
world() {
  local tp=1 pp=1 dp=1 cp=1 kv kvs
  IFS=, read -ra kvs <<<"$1"
  for kv in "${kvs[@]}"; do
    case ${kv%%=*} in tp) tp=${kv#*=} ;; pp) pp=${kv#*=} ;; dp) dp=${kv#*=} ;; cp) cp=${kv#*=} ;; esac
  done
  echo $((tp * pp * dp * cp))
}

# mpi LAYOUT SUBCOMMAND ARGS...: `ckpt SUBCOMMAND --layout LAYOUT ARGS` as a
# job of world(LAYOUT) ranks.
mpi() {
  local layout=$1 sub=$2
  shift 2
  # shellcheck disable=SC2086
  $MPIRUN -np "$(world "$layout")" "$CKPT" "$sub" --layout "$layout" "$@"
}

# run_to NAME CMD...: runs CMD, stdout to $SCRATCH/NAME.out, stderr appended to
# $SCRATCH/NAME.err (copied to our stderr); writes the exit code to $SCRATCH/NAME.rc
# and never fails the script (negative controls are expected to fail).
run_to() {
  local name=$1 rc=0
  shift
  log "+ $*"
  "$@" >"$SCRATCH/$name.out" 2>"$SCRATCH/$name.err" || rc=$?
  cat "$SCRATCH/$name.err" >&2
  echo "$rc" >"$SCRATCH/$name.rc"
  return 0
}

# must NAME CMD...: like run_to, but a non-zero exit ends the scenario.
must() {
  local name=$1
  run_to "$@"
  local rc
  rc=$(cat "$SCRATCH/$name.rc")
  if [[ $rc != 0 ]]; then
    log "FAILED ($rc): ${*:2}"
    tail -n 20 "$SCRATCH/$name.err" >&2 || true
    exit 1
  fi
}

# Seconds since the epoch with nanoseconds (for wall times measured here).
now() { date +%s.%N; }

# py: runs the Python program on stdin with these helpers predefined:
#   J(name)     $SCRATCH/<name>.out as one JSON document, else its last JSON line
#   RC(name)    the exit code recorded by run_to/must
#   TXT(name)   stdout+stderr text of a run
#   emit(...)   prints the evidence object (cli/cmd_scenario.cc); verdict is
#               PASS iff every check is true; gaps: measured shortfalls of a
#               liveness property that are reported but not judged
read -r -d '' PY_PRELUDE <<'PYEOF' || true
import json, os, re, sys
S = os.environ["SCRATCH"]
REDUCED = os.environ.get("REDUCED", "0") == "1"
ID = os.environ["SCENARIO_ID"]

def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""

def J(name):
    text = _read(os.path.join(S, name + ".out"))
    try:
        return json.loads(text)  # one (pretty-printed) JSON document
    except ValueError:
        pass
    lines = [l for l in text.splitlines() if l.strip().startswith(("{", "["))]
    if not lines:
        raise SystemExit(f"{ID}: no JSON output from step '{name}'; stderr: {TXT(name)[-800:]}")
    return json.loads(lines[-1])

def RC(name):
    return int(_read(os.path.join(S, name + ".rc")).strip() or "-1")

def TXT(name):
    return _read(os.path.join(S, name + ".out")) + _read(os.path.join(S, name + ".err"))

def emit(title, setup, numbers, checks, claim, nc_what, nc_numbers, nc_shows_failure, headline=None,
         nc_headline=None, gaps=()):
    checks = [{"name": n, "ok": bool(ok)} for n, ok in checks]
    ev = {"id": ID, "title": title, "setup": setup, "numbers": numbers,
          "verdict": "PASS" if all(c["ok"] for c in checks) else "FAIL", "checks": checks, "claim": claim,
          "negative_control": {"what": nc_what, "numbers": nc_numbers, "shows_failure": bool(nc_shows_failure)},
          "reduced": REDUCED}
    if headline:
        ev["headline"] = headline
    if nc_headline:
        ev["negative_control"]["headline"] = nc_headline
    gaps = [g for g in gaps if g]
    if gaps:
        ev["gaps"] = gaps  # measured shortfalls outside the verdict (reported, not judged)
    for c in checks:
        if not c["ok"]:
            print(f"[{ID}] check failed: {c['name']}", file=sys.stderr)
    print(json.dumps(ev, ensure_ascii=False))
PYEOF
py() {
  local prog
  prog=$(cat)
  "$PY" -c "$PY_PRELUDE
$prog"
}
