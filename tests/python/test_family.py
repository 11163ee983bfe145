"""Model-family rules exposed to Python (ckpt.model_shards, reshard/family.h):
the descriptors of a rank come from the C++ rules, so Python code (the
torch_gpt example, torch_bridge) need not copy them."""
import pytest

import ckpt

TINY = {"vocab_size": 1100, "hidden": 64, "ffn_hidden": 128, "num_layers": 8, "num_heads": 16,
        "num_query_groups": 8, "norm_keys": "te"}


def by_key(shards):
    out = {}
    for s in shards:
        out.setdefault(s["key"], []).append(s)
    return out


def test_megatron_gpt_descriptors_of_a_rank():
    assert "megatron_gpt" in ckpt.model_families()
    # tp=2, pp=2: rank 3 is tp 1 of the last stage (layers 4-7, output layer).
    s = by_key(ckpt.model_shards(TINY, "tp=2,pp=2", 3))
    out = s["output_layer.weight"][0]
    assert out["global_shape"] == (1280, 64) and out["global_offset"] == (640, 0)
    assert out["local_shape"] == (640, 64) and out["allow_shape_mismatch"]
    assert "embedding.word_embeddings.weight" not in s  # untied: first stage only
    fc1 = s["decoder.layers.4.mlp.linear_fc1.weight"]  # SwiGLU: two shards of one parameter
    # global [2 * ffn, h]: W_1 at row block 1, V_1 at block tp + 1 (blocks of ffn / tp = 64 rows)
    assert [f["global_offset"] for f in fc1] == [(64, 0), (192, 0)]
    assert len({f["param"] for f in fc1}) == 1 and fc1[0]["param_shape"] == (128, 64)
    assert [f["param_offset"] for f in fc1] == [0, 64 * 64]
    norm = s["decoder.layers.4.self_attention.linear_qkv.layer_norm_weight"][0]
    assert norm["replica_id"] == [0, 1, 0]  # TP-replicated: tp rank in the second slot


def test_canonical_config_and_errors():
    cfg = ckpt.model_config(TINY)
    assert cfg["make_vocab_size_divisible_by"] == 128 and cfg["dtype"] == "bf16"
    with pytest.raises(ckpt.InvalidArgumentError, match="num_heads|query"):
        ckpt.model_config(dict(TINY, num_heads=7))
    with pytest.raises(ckpt.NotFoundError, match="t5"):
        ckpt.model_shards({}, "tp=1", 0, family="t5")
