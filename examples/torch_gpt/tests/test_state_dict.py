"""The sharded state descriptors: ckpt's keys and rules, coverage, and the
scatter/gather round trip. All ranks of a layout are built in this one process
(descriptors need only tp/dp coordinates, no process group)."""
from __future__ import annotations

import dataclasses

import torch

from torch_gpt.config import TrainConfig, preset
from torch_gpt.data import PretrainingSampler
from torch_gpt.model import GPTModel
from torch_gpt.optim import AdamW, LrConfig, LrScheduler
from torch_gpt.parallel import ParallelState
from torch_gpt.reference import gather_global, global_init, global_shapes, scatter_global
from torch_gpt.rng import RngState
from torch_gpt.sharding import ObjectShard, TensorShard, check_coverage
from torch_gpt.state import checkpoint_metadata, model_config_json, model_shards, sharded_state_dict

CKPT_GPT_FIELDS = {  # reshard/gpt_config_json.cc GptConfigToJson + MoeConfigToJson
    "vocab_size", "hidden", "ffn_hidden", "num_layers", "num_heads", "num_query_groups",
    "kv_channels", "swiglu", "tied_embeddings", "add_bias_linear", "qkv_bias",
    "make_vocab_size_divisible_by", "dtype", "first_stage_layers", "last_stage_layers",
    "stack_layers", "num_experts", "moe_ffn_hidden", "norm_keys"}


def _rank_models(cfg, tp, dp=1):
    out = []
    for rank in range(tp * dp):
        ps = ParallelState(tp=tp, dp=dp, rank=rank)
        out.append(GPTModel(cfg, ps, RngState(0, ps)))
    return out


def _full_sd(model):
    ps = model.ps
    opt = AdamW(model.named_parameters())
    sched = LrScheduler(LrConfig())
    sampler = PretrainingSampler(100, 2, 8, ps.dp_rank, ps.dp)
    return sharded_state_dict(model, opt, sched, sampler, model.rng,
                              train_cfg=TrainConfig(tp=ps.tp), iteration=0)


def test_keys_replicas_and_swiglu_blocks_tp2_dp2():
    cfg = preset("tiny")
    models = _rank_models(cfg, tp=2, dp=2)
    sds = [_full_sd(m) for m in models]
    sd = sds[3]  # tp_rank 1, dp_rank 1
    fc1 = [s for s in sd.values() if isinstance(s, TensorShard)
           and s.key == "decoder.layers.1.mlp.linear_fc1.weight"]
    assert [s.global_offset for s in fc1] == [(64, 0), (192, 0)]  # blocks 1 and 3 of 4 x 64 rows
    assert all(s.global_shape == (256, 64) and s.replica_id == (0, 0, 1) for s in fc1)
    emb = sd["embedding.word_embeddings.weight"]
    assert emb.global_shape == (288, 64) and emb.global_offset == (144, 0)
    assert emb.allow_shape_mismatch
    # Megatron-Core's keys for the norms (module names input_layernorm, pre_mlp_layernorm).
    assert sd["decoder.layers.0.self_attention.linear_qkv.layer_norm_weight"].replica_id == (0, 1, 1)
    assert sd["decoder.layers.0.mlp.linear_fc1.layer_norm_weight"].replica_id == (0, 1, 1)
    assert not any("input_layernorm" in k or "pre_mlp_layernorm" in k for k in sd)
    assert sd["decoder.layers.0.self_attention.linear_proj.weight"].global_offset == (0, 32)
    assert sd["decoder.layers.0.self_attention.linear_qkv.weight"].global_shape == (128, 64)
    assert sd["optimizer.state.exp_avg.output_layer.weight"].global_shape == (288, 64)
    assert sd["optimizer.step"].replica_id == (0, 1, 1)
    rng = sd["resume.rng_state"]
    assert isinstance(rng, ObjectShard) and rng.global_shape == (1, 2)
    assert rng.global_offset == (0, 1) and rng.replica_id == (0, 0, 1)
    check_coverage([[s for s in d.values() if isinstance(s, TensorShard)] for d in sds])
    keys = {s.key for s in sd.values()}
    for state in ("fp32_param", "exp_avg", "exp_avg_sq"):
        assert f"optimizer.state.{state}.decoder.final_layernorm.weight" in keys


def test_scatter_gather_round_trip_and_padding_per_tp():
    cfg = preset("tiny")
    g = global_init(cfg, seed=3)
    assert {k: tuple(v.shape) for k, v in g.items()} == global_shapes(cfg)
    for tp in (1, 2, 4):
        models = _rank_models(cfg, tp)
        shards = [model_shards(m) for m in models]
        for s in shards:
            scatter_global(s, g)
        emb = models[-1].embedding.word_embeddings.weight
        assert emb.shape[0] == cfg.padded_vocab_size(tp) // tp  # 272, 288, 320 padded
        back = gather_global(shards, cfg.vocab_size)
        assert back.keys() == g.keys() and all(torch.equal(back[k], g[k]) for k in g)


def test_qkv_rows_per_rank_are_whole_query_groups():
    cfg = preset("tiny")  # np 8, ng 4, hn 8: a group is (2 + 2) * 8 = 32 rows
    g = global_init(cfg, seed=3)
    models = _rank_models(cfg, tp=4)
    for m in models:
        scatter_global(model_shards(m), g)
        local = m.decoder.layers[0].self_attention.linear_qkv.weight
        r = m.ps.tp_rank
        assert torch.equal(local, g["decoder.layers.0.self_attention.linear_qkv.weight"][32 * r:32 * (r + 1)])


def test_metadata_has_ckpt_gpt_fields():
    cfg = dataclasses.replace(preset("tiny"), tied_embeddings=True)
    j = model_config_json(cfg)
    assert set(j) == CKPT_GPT_FIELDS and j["dtype"] == "fp32" and j["tied_embeddings"]
    meta = checkpoint_metadata(cfg, ParallelState(tp=2, dp=2))
    assert meta["layout"] == {"tp": 2, "pp": 1, "dp": 2, "cp": 1, "ep": 1, "vpp": 1, "world": 4}
    assert meta["optimizer"]["states"] == ["fp32_param", "exp_avg", "exp_avg_sq"]
