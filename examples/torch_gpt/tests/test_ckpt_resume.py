"""Same-layout resume through ckpt, with a real SIGKILL in the middle of a save.

TP2 (2 ranks, dropout 0.1 so the RNG state matters): N = 8 steps straight;
the same job saving every N/2 steps is SIGKILLed while a later save is in
flight; `ckpt verify` passes on what is committed; a job started under mpirun
resumes from iteration N/2 and trains to N. Every loss and every element of
every saved tensor (parameters, Adam moments, step) equals the straight run
bit for bit. Negative controls on the same checkpoint: resuming without the
RNG state changes the next loss; without the data iterator position the job
trains on samples it already saw (and the loss changes).
"""
from __future__ import annotations

import os
import subprocess

import pytest

from conftest import ckpt_job
from torch_gpt import story

N = 8
TP2 = ["--model", "tiny", "--tp", "2", "--micro-batch", "2", "--global-batch", "8",
       "--dropout", "0.1"]


@pytest.fixture(scope="module")
def runs(ckpt_build, tmp_path_factory):
    d = tmp_path_factory.mktemp("resume")
    r = {"d": d, "build": ckpt_build}
    r["straight"] = ckpt_job(ckpt_build, d, "straight", 2,
                             TP2 + ["--steps", N, "--save", d / "straight"])
    log = d / "crash.jsonl"
    cmd = story.train_cmd(2, TP2 + ["--steps", str(3 * N // 2), "--save", str(d / "ckpt"),
                                    "--save-interval", str(N // 2), "--log", str(log)])
    r["kill"] = story.run_and_kill_mid_save(cmd, ckpt_build, str(d / "ckpt"), N // 2 + 1,
                                            log=str(d / "crash.out"))
    r["crash"] = story.read_jsonl(log)
    return r


def test_kill_mid_save_leaves_the_previous_checkpoint_intact(runs):
    k = runs["kill"]
    print(f"SIGKILL during the save of iteration {k['killed_in_save_of']}: "
          f"{k['tmp_dir']} held {k['files_at_kill']}; committed {k['committed']}")
    assert k["exit_code"] == -9 and N // 2 in k["committed"]
    assert k["killed_in_save_of"] not in k["committed"]
    ver = story.ckpt_json(runs["build"], "verify", str(runs["d"] / "ckpt"))
    assert ver["ok"], ver


def test_resume_under_mpirun_is_bitwise_equal_to_the_straight_run(runs):
    d, b = runs["d"], runs["build"]
    resumed = ckpt_job(b, d, "resumed", 2, TP2 + ["--steps", N, "--load", d / "ckpt",
                                                  "--load-iter", N // 2, "--save",
                                                  d / "resumed"], launcher="mpirun")
    losses = [r["loss_hex"] for r in runs["crash"][:N // 2] + resumed]
    straight = [r["loss_hex"] for r in runs["straight"]]
    assert [r["iteration"] for r in resumed] == list(range(N // 2 + 1, N + 1))
    assert losses == straight, "losses differ from the uninterrupted run"
    c = story.compare_digests(story.tensor_digests(b, str(d / "straight"), N),
                              story.tensor_digests(b, str(d / "resumed"), N))
    print(f"straight {N} == {N // 2} + save + SIGKILL + resume {N // 2}: {N}/{N} losses bitwise; "
          f"final state {c['tensors_equal']}/{c['tensors']} tensors, "
          f"{c['elements_in_equal_tensors']:,}/{c['elements']:,} elements bitwise equal")
    assert not c["differing"] and c["tensors"] > 60
    diff = subprocess.run([story.ckpt_bin(b), "diff", str(d / "straight"), str(d / "resumed")],
                          stdout=subprocess.PIPE, text=True, timeout=120)
    assert diff.returncode == 0, diff.stdout  # tensors and one-cell objects (resume state)


def test_negative_control_resume_without_rng_state(runs):
    d = runs["d"]
    r = ckpt_job(runs["build"], d, "no_rng", 2, TP2 + [
        "--steps", N // 2 + 1, "--load", d / "ckpt", "--load-iter", N // 2, "--no-load-rng"])
    want = runs["straight"][N // 2]
    print(f"without RNG state: loss at step {N // 2 + 1} {r[0]['loss']:.6f} vs "
          f"{want['loss']:.6f} (|diff| {abs(r[0]['loss'] - want['loss']):.2e})")
    assert r[0]["iteration"] == want["iteration"] and r[0]["loss_hex"] != want["loss_hex"]


def test_negative_control_resume_without_iterator_position(runs):
    d = runs["d"]
    r = ckpt_job(runs["build"], d, "no_iter", 2, TP2 + [
        "--steps", N // 2 + 1, "--load", d / "ckpt", "--load-iter", N // 2,
        "--no-load-iterator"])
    first, want = runs["straight"][0], runs["straight"][N // 2]
    print(f"without the iterator position: step {N // 2 + 1} trains on samples from "
          f"{r[0]['first_sample']} (the straight run: {want['first_sample']}; step 1 used "
          f"{first['first_sample']}), loss {r[0]['loss']:.6f} vs {want['loss']:.6f}")
    assert r[0]["first_sample"] == first["first_sample"] != want["first_sample"]
    assert r[0]["consumed_samples"] < want["consumed_samples"]
    assert r[0]["loss_hex"] != want["loss_hex"]
