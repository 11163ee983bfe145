"""Two tiers (ckpt.TieredCheckpointer, issue 33) in the GPT job: local saves every 2 steps on
2 simulated nodes (one rank each, TP2), replicated to the other node; the global tier every 4,
drained in the background from the local copy. The job ends after step 6 (after local 6,
before the next global save); node 1's local dir is removed (a fresh node); the restarted job
resumes from local 6 - not global 4 - rank 1 fetching its copy from node 0's replica, and
trains to 8. Losses and the final state equal a straight 8-step run bit for bit.
"""
from __future__ import annotations

import json
import shutil

import torch

from conftest import ckpt_job
from torch_gpt import story

TP2 = ["--model", "tiny", "--tp", "2", "--micro-batch", "2", "--global-batch", "8", "--dropout", "0.1"]


def test_resume_from_the_local_tier_after_losing_a_node_is_bitwise(ckpt_build, tmp_path):
    d = tmp_path
    straight = ckpt_job(ckpt_build, d, "straight", 2, TP2 + ["--steps", 8, "--save-ref", d / "straight.pt"])
    tiers = ["--save", d / "global", "--local-dir", str(d / "node{node}"), "--local-every", 2,
             "--global-every", 4, "--replicas", 1, "--ranks-per-node", 1, "--ckpt-stats", d / "stats.jsonl"]
    first = ckpt_job(ckpt_build, d, "first", 2, TP2 + tiers + ["--steps", 6])
    shutil.rmtree(d / "node1")  # node 1 is replaced by a fresh one: its local copies are gone
    resumed = ckpt_job(ckpt_build, d, "resumed", 2, TP2 + tiers + ["--steps", 8, "--save-ref", d / "resumed.pt"])

    stats = [json.loads(line) for line in (d / "stats.jsonl").read_text().splitlines()]
    joined = [s for s in stats if s["op"] == "tier_joined"]  # each local save, finished in the background
    assert [s["iteration"] for s in joined] == [2, 4, 6, 8], joined
    saves = [s for s in stats if s["op"] == "tier_save"]
    assert all(s["local"]["mode"] == "background" and s["local"]["snapshot_bytes"] > 0 for s in saves), saves
    drained = [s["global"] for s in joined if s["global"]]
    assert drained and drained[0]["iteration"] == 4 and drained[0]["drained_from"].endswith("node0/rank_0"), stats
    ver = story.ckpt_json(ckpt_build, "verify", str(d / "global"))  # the drained global iterations 4 and 8
    assert ver["ok"], ver
    assert ckpt_meta(d / "global", 4)["model"]["family"] == "megatron_gpt"  # so `ckpt reshard` can read it
    choice = next(s["choice"] for s in stats if s["op"] == "tier_resume" and s["choice"]["tier"] != "none")
    print(f"resumed from {choice['tier']} {choice['iteration']} (global {choice['global_iteration']}): "
          f"{choice['why']}")
    assert (choice["tier"], choice["iteration"], choice["global_iteration"]) == ("local", 6, 4), choice
    assert [r["iteration"] for r in resumed] == [7, 8]
    losses = [r["loss_hex"] for r in first + resumed]
    assert losses == [r["loss_hex"] for r in straight], "losses differ from the uninterrupted run"
    want, got = torch.load(d / "straight.pt"), torch.load(d / "resumed.pt")  # the gathered final states
    assert want["tensors"].keys() == got["tensors"].keys() and len(want["tensors"]) > 20
    differing = [k for k, t in want["tensors"].items() if not torch.equal(t, got["tensors"][k])]
    assert not differing, differing
    assert want["objects"] == got["objects"]  # iteration, sampler position, LR schedule, RNG state


def ckpt_meta(root, iteration) -> dict:
    """The metadata a drained global checkpoint carries (the job's GPT config and layout)."""
    from torch_gpt.ckpt_io import import_ckpt
    return import_ckpt().inspect(str(root), iteration=iteration).get("metadata", {})
