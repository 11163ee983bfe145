"""Progress of long operations (issue 29 item 5): the Python progress=
callback, the CLI's JSON progress events with --json (stderr; stdout's JSON
report unchanged), a single updating line on a terminal, nothing when piped."""
import glob
import json
import os
import pty
import select
import subprocess

import numpy as np

import ckpt

CKPT = os.environ.get("CKPT_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "build", "cli", "ckpt"))
KEYS = {"op", "phase", "bytes_done", "bytes_total", "files_done", "files_total", "elapsed", "rate", "eta", "final"}


def _state(n=1 << 21):  # 8 MiB of float32, two tensors
    return {"a": ckpt.ShardedTensor.from_rank_offsets("a", np.arange(n, dtype=np.float32)),
            "b": ckpt.ShardedTensor.from_rank_offsets("b", np.ones(n // 4, dtype=np.float32))}


def _check_events(events, op):
    assert events, "no progress reported"
    assert all(e["op"] == op for e in events), events
    done = [e["bytes_done"] for e in events]
    assert done == sorted(done), f"bytes_done not monotonic: {done}"
    assert [e["final"] for e in events] == [False] * (len(events) - 1) + [True], events
    last = events[-1]
    assert last["bytes_done"] == last["bytes_total"] > 0, last
    assert last["files_done"] == last["files_total"] >= 1, last
    for e in events[:-1]:
        assert e["bytes_done"] <= e["bytes_total"] or e["bytes_total"] == 0, e


def test_python_progress_callback(tmp_path, monkeypatch):
    monkeypatch.setenv("CKPT_PROGRESS_INTERVAL_MS", "1")
    seen = []
    ckpt.save(_state(), tmp_path, 1, progress=seen.append)
    assert all(set(e) == KEYS for e in seen), seen[0]
    _check_events(seen, "save")
    assert seen[-1]["bytes_done"] >= 10 * (1 << 20)  # the shard file's bytes, metadata included
    for name, call in [("load", lambda cb: ckpt.load(_state(), tmp_path, progress=cb)),
                       ("verify", lambda cb: ckpt.verify(tmp_path, progress=cb)),
                       ("fingerprint", lambda cb: ckpt.fingerprint(tmp_path, progress=cb))]:
        seen = []
        call(seen.append)
        _check_events(seen, name)
        assert seen[-1]["bytes_done"] >= 10 * (1 << 20), (name, seen[-1])


def test_python_progress_callback_errors_never_fail_the_operation(tmp_path):
    calls = []

    def bad(event):
        calls.append(event)
        raise RuntimeError("callback bug")

    ckpt.save(_state(1024), tmp_path, 1, progress=bad)
    assert len(calls) == 1  # reported once as unraisable, then no more calls
    assert ckpt.verify(tmp_path)["ok"]


def _cli(*args, env=None):
    e = dict(os.environ, CKPT_PROGRESS_INTERVAL_MS="1", **(env or {}))
    p = subprocess.run([CKPT, *map(str, args)], capture_output=True, text=True, timeout=120, env=e)
    assert p.returncode == 0, f"ckpt {args}: exit {p.returncode}\n{p.stdout}{p.stderr}"
    return p.stdout, p.stderr


def _events(stderr):
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert all(e.pop("event") == "progress" for e in events), events
    for e in events:  # the CLI spells elapsed/eta with their unit
        e["elapsed"], e["eta"] = e.pop("elapsed_s"), e.pop("eta_s")
        assert set(e) == KEYS, e
    return events


def test_cli_json_progress_events_and_quiet_when_piped(tmp_path):
    ckpt.save(_state(), tmp_path / "py", 1)
    out, err = _cli("verify", tmp_path / "py")
    assert out.startswith("OK"), out
    assert err == "", f"piped stderr must stay quiet: {err!r}"
    out, err = _cli("verify", tmp_path / "py", "--json")
    assert json.loads(out)["ok"]  # stdout: the report, one JSON document, as before
    _check_events(_events(err), "verify")
    out, err = _cli("verify", tmp_path / "py", "--json", "--no-progress")
    assert err == "" and json.loads(out)["ok"]
    out, err = _cli("fingerprint", tmp_path / "py", "--json")
    assert json.loads(out)["digest"] == ckpt.fingerprint(tmp_path / "py")["digest"]
    _check_events(_events(err), "fingerprint")


def test_cli_save_reshard_convert_json_progress(tmp_path):
    src = tmp_path / "gpt"
    out, err = _cli("save", "--root", src, "--iter", 3, "--model", "tiny", "--layout", "tp=1", "--json")
    json.loads(out)
    _check_events(_events(err), "save")
    out, err = _cli("load", "--root", src, "--model", "tiny", "--layout", "tp=1", "--json")
    json.loads(out)
    _check_events(_events(err), "load")
    out, err = _cli("reshard", src, tmp_path / "tp2", "--to", "tp=2,pp=1,dp=1", "--json")
    assert json.loads(out)["op"] == "reshard"
    events = _events(err)
    _check_events(events, "reshard")
    # Bytes once: the source's shard reads (as the report's bytes_read), not the
    # destination's read-back or the manifests (it reported 3.1 MB, 3 files).
    src_h5 = glob.glob(str(src / "iter_*" / "*.h5"))
    assert events[-1]["files_done"] == len(src_h5), events[-1]
    assert events[-1]["bytes_done"] == json.loads(out)["bytes_read"], (events[-1], out)
    out, err = _cli("convert", src, tmp_path / "m.pt", "--to", "torch", "--json")
    assert json.loads(out)["op"] == "convert"
    _check_events(_events(err), "convert")


def test_cli_terminal_shows_one_updating_line(tmp_path):
    ckpt.save(_state(), tmp_path, 1)
    master, slave = pty.openpty()
    env = dict(os.environ, CKPT_PROGRESS_INTERVAL_MS="1")
    p = subprocess.Popen([CKPT, "verify", str(tmp_path)], stdout=subprocess.PIPE, stderr=slave, env=env)
    os.close(slave)
    text = b""
    while True:
        r, _, _ = select.select([master], [], [], 60)
        assert r, "no terminal output within 60 s"
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        text += chunk
    out, _ = p.communicate(timeout=60)
    os.close(master)
    assert p.returncode == 0 and out.startswith(b"OK"), out
    line = text.decode()
    assert line.startswith("\r") and "verify read: " in line and "MB/s" in line, repr(line)
    assert line.rstrip("\r\n").count("\n") == 0, f"one updating line, not many: {line!r}"
    assert "done in" in line and line.endswith("\n"), repr(line)


def test_python_async_save_progress_reports_the_background_write(tmp_path, monkeypatch):
    """async_save(progress=): the background drain's writes, op "async_save",
    the final event (bytes_done == the shard file) when the save is joined."""
    monkeypatch.setenv("CKPT_PROGRESS_INTERVAL_MS", "1")
    seen = []
    h = ckpt.async_save(_state(), tmp_path, 1, progress=seen.append)
    h.wait(60)
    _check_events(seen, "async_save")
    size = os.path.getsize(glob.glob(str(tmp_path / "iter_0000001" / "*.h5"))[0])
    assert 0.99 * size <= seen[-1]["bytes_done"] and seen[-1]["bytes_done"] >= 10 * (1 << 20), (seen[-1], size)
    n = len(seen)
    ckpt.async_save(_state(1024), tmp_path, 2).wait(60)  # no callback: nothing more reported
    assert len(seen) == n and ckpt.verify(tmp_path)["ok"]


def test_cli_diff_json_progress_counts_both_sides(tmp_path):
    ckpt.save(_state(), tmp_path / "a", 1)
    ckpt.save(_state(), tmp_path / "b", 2)
    out, err = _cli("diff", tmp_path / "a", tmp_path / "b", "--json")
    json.loads(out)  # stdout: the report, unchanged
    events = _events(err)
    _check_events(events, "diff")
    h5 = [os.path.getsize(p) for p in glob.glob(str(tmp_path / "*" / "iter_*" / "*.h5"))]
    assert events[-1]["files_done"] == 2 and 0.9 * sum(h5) <= events[-1]["bytes_done"] < 2 * sum(h5), (events[-1], h5)
    out, err = _cli("diff", tmp_path / "a", tmp_path / "b", "--json", "--no-progress")
    assert err == ""


def _per_operation(events):
    """Events split after each final one: one list per operation."""
    ops, cur = [], []
    for e in events:
        cur.append(e)
        if e["final"]:
            ops.append(cur)
            cur = []
    assert not cur, f"events after the last final one: {cur}"
    return ops


def test_cli_train_reports_each_save_sync_and_async(tmp_path):
    for mode, extra in (("save", []), ("async_save", ["--async-save"])):
        out, err = _cli("train", "--root", tmp_path / mode, "--steps", 4, "--save-every", 2, "--json", *extra)
        assert json.loads(out.splitlines()[-1])["op"] == "train"  # the summary, unchanged
        ops = _per_operation(_events(err))
        assert len(ops) == 2, (mode, ops)  # iterations 2 and 4
        for events in ops:
            _check_events(events, mode)
        h5 = glob.glob(str(tmp_path / mode / "iter_0000004" / "*.h5"))
        assert ops[-1][-1]["bytes_done"] >= 0.99 * os.path.getsize(h5[0]), (ops[-1][-1], h5)
