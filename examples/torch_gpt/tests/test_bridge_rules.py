"""The torch bridge's rule table (ckpt.TensorParallel with Split / GatedSplit,
keys=) describes this job's model exactly as ckpt's own rules do (state.py's
model_shards, from ckpt.model_shards):
the same keys, global shapes and offsets, padded-vocab flags and main
replicas, over views of the same parameter memory, at TP 1, 2 and 4 (DP 2).
This pins the rules the example needs before its adapter moves onto the
bridge (the bridge's descriptors then write the same checkpoint format)."""
from __future__ import annotations

import pytest

from torch_gpt.ckpt_io import import_ckpt
from torch_gpt.config import preset
from torch_gpt.model import GPTModel
from torch_gpt.parallel import ParallelState
from torch_gpt.rng import RngState
from torch_gpt.state import checkpoint_key, model_shards


def bridge_rules(ckpt, swiglu: bool) -> dict:
    tb = ckpt.torch_bridge
    return {"embedding.word_embeddings.weight": tb.Split(0, allow_shape_mismatch=True),
            "output_layer.weight": tb.Split(0, allow_shape_mismatch=True),
            "*.linear_qkv.weight": 0, "*.linear_proj.weight": 1, "*.linear_fc2.weight": 1,
            "*.linear_fc1.weight": tb.GatedSplit(0) if swiglu else 0}


def _box(d):
    return (d.key, tuple(d.global_shape), tuple(d.global_offset), tuple(d.local_shape),
            d.data.data_ptr(), bool(d.allow_shape_mismatch), all(r == 0 for r in d.replica_id))


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_bridge_rules_reproduce_the_hand_written_descriptors(tp):
    ckpt = import_ckpt()
    cfg = preset("tiny")
    for rank in range(2 * tp):
        ps = ParallelState(tp=tp, dp=2, rank=rank)
        model = GPTModel(cfg, ps, RngState(0, ps))
        tensor_parallel = ckpt.TensorParallel(ps.tp_rank, tp, dp_rank=ps.dp_rank,
                                              rules=bridge_rules(ckpt, cfg.swiglu))
        state = ckpt.TorchState(model, tp=tensor_parallel, rng=False, keys=checkpoint_key)
        got = sorted(_box(d) for d in ckpt.torch_bridge.flat_state(state.sharded_state_dict()).values())
        want = sorted((e.key, tuple(e.global_shape), tuple(e.global_offset), tuple(e.tensor.shape),
                       e.tensor.data_ptr(), e.allow_shape_mismatch, e.is_main_replica)
                      for e in model_shards(model))
        assert got == want, f"tp {tp} rank {rank}"
        assert any(k.endswith("linear_qkv.layer_norm_weight") for k, *_ in got)  # MCore's key map


def test_a_plain_split_of_swiglu_fc1_differs():
    """The negative control: fc1 as one plain axis-0 Split is not state.py's rule at TP 2."""
    ckpt = import_ckpt()
    cfg = preset("tiny")
    ps = ParallelState(tp=2, dp=1, rank=1)
    model = GPTModel(cfg, ps, RngState(0, ps))
    rules = {**bridge_rules(ckpt, cfg.swiglu), "*.linear_fc1.weight": 0}
    state = ckpt.TorchState(model, tp=ckpt.TensorParallel(1, 2, rules=rules), rng=False, keys=checkpoint_key)
    got = {_box(d)[:3] for d in ckpt.torch_bridge.flat_state(state.sharded_state_dict()).values()}
    want = {(e.key, tuple(e.global_shape), tuple(e.global_offset)) for e in model_shards(model)}
    assert got != want and {k for k, *_ in got} == {k for k, *_ in want}
