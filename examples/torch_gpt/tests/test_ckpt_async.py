"""ckpt.async_save from the training loop (TP2, 2 ranks): at every save step
the job first saves synchronously into a second root, then starts an async
save and keeps training (overwriting the parameters and Adam moments while the
save is written). Each async checkpoint equals the synchronous one of the same
step (`ckpt diff`: every tensor and one-cell object), and the time the loop
was blocked is measured against a plain copy (torch.clone) of the same bytes.
"""
from __future__ import annotations

import subprocess

from conftest import ckpt_job
from torch_gpt import story


def test_async_save_equals_sync_save_and_blocks_briefly(ckpt_build, tmp_path):
    d, b = tmp_path, ckpt_build
    ckpt_job(b, d, "async", 2, ["--model", "tiny", "--tp", "2", "--micro-batch", "2",
                                "--global-batch", "8", "--steps", 6, "--save-interval", 2,
                                "--save", d / "async", "--async-save", "--sync-copy",
                                d / "sync", "--ckpt-stats", d / "stats.jsonl"])
    assert story.committed_iterations(str(d / "async")) == [2, 4, 6]
    for it in (2, 4, 6):
        diff = subprocess.run([story.ckpt_bin(b), "diff", str(d / "async"), str(d / "sync"),
                               "--iter-a", str(it), "--iter-b", str(it)],
                              stdout=subprocess.PIPE, text=True, timeout=120)
        assert diff.returncode == 0, diff.stdout
    stats = [r for r in story.read_jsonl(str(d / "stats.jsonl")) if r["op"] == "async_save"]
    assert [r["iteration"] for r in stats] == [2, 4, 6]
    for r in stats:
        print(f"async save at {r['iteration']}: {r['bytes'] / 1e6:.2f} MB, loop blocked "
              f"{r['blocking_s'] * 1e3:.2f} ms (ckpt's snapshot {r['ckpt_blocking_s'] * 1e3:.2f} "
              f"ms) vs one memcpy of the same bytes {r['memcpy_s'] * 1e3:.3f} ms "
              f"({r['blocking_ratio_vs_memcpy']:.1f}x / {r['ckpt_blocking_ratio_vs_memcpy']:.1f}x)"
              f", committed after {r['seconds']:.3f} s")
        assert 0 < r["blocking_s"] < r["seconds"]
