"""Everything a checkpoint needs, per rank, described with ckpt's keys and
Megatron-Core's sharding rules (ckpt reshard/megatron_gpt.{h,cc},
reshard/dist_optimizer.h, ckpt/workload/train_keys.h). The model tensors'
descriptors are not re-derived here: ckpt.model_shards (the C++ rules of the
"megatron_gpt" model family) gives each rank's boxes and the parameter slice
that holds each, and model_shards() below views the parameters accordingly.

Model tensors (key = the parameter's module path, see model.py):
  column-parallel (linear_qkv; linear_fc1 without SwiGLU)  axis 0, replica (0, 0, dp)
  SwiGLU linear_fc1: TWO shards of one key from the local [W_r; V_r]:
      W_r at row block r, V_r at row block tp + r of 2*tp,  replica (0, 0, dp)
  row-parallel (linear_proj, linear_fc2)                   axis 1, replica (0, 0, dp)
  norms (TP-replicated)                                    whole,  replica (0, tp_rank, dp)
  embedding.word_embeddings / output_layer (padded vocab)  axis 0, replica (0, 0, dp),
      allow_shape_mismatch (padding differs per TP). Tied: only the embedding
      is registered (pp = 1, as ckpt with has_embedding).
Optimizer (ckpt's model-space format): "optimizer.state.<s>.<param key>" for
s in fp32_param, exp_avg, exp_avg_sq, each with its parameter's boxes. This job
trains in fp32 without a distributed optimizer, so fp32_param is a view of the
parameter itself (registered anyway: ckpt's loaders and a distributed-optimizer
job expect all three states) and every DP rank holds a full copy: the DP slot
of the replica id is dp_rank (ckpt's distributed optimizer puts 0 there
because its DP ranks hold disjoint flat-range fragments instead). Step:
"optimizer.step", int64 [1], replica (pp, tp, dp): saved by rank 0 only.
Objects (JSON-serialisable dicts; global shape (1,) and replica (pp, tp, dp)
unless said): resume.args (model + training config), resume.progress
({"iteration"}), resume.lr_scheduler (ckpt's LrScheduler JSON),
resume.data_iterator (ckpt's DataIteratorState JSON, ledger merged over DP),
resume.rng_state on a (pp, tp) grid at (pp_rank, tp_rank), replica (0, 0, dp)
(as MCore's rng_state ShardedObject; ckpt's own C++ job stores a
layout-free Philox state under resume.rng, hence the different key).

sharded_state_dict() is collective over the DP group (it merges the sampler
ledger). It serves the job's own pure-PyTorch reference checkpoint
(reference.py, --save-ref) and its gather/scatter (harness.py); a ckpt
checkpoint's descriptors come from ckpt's torch bridge with the same keys and
rules (ckpt_adapter.py: a rule table and checkpoint_key;
tests/test_bridge_rules.py pins that the bridge agrees with ckpt.model_shards).
"""
from __future__ import annotations

import functools
import json
import math

import torch
import torch.distributed as dist

from .config import GPTConfig, TrainConfig
from .data import PretrainingSampler, SampleLedger
from .optim import AdamW, LrScheduler
from .parallel import ParallelState
from .rng import RngState
from .sharding import ObjectShard, TensorShard, from_rank_offsets

ADAM_STATES = ("fp32_param", "exp_avg", "exp_avg_sq")
STEP_KEY = "optimizer.step"
ARGS_KEY, PROGRESS_KEY = "resume.args", "resume.progress"
LR_KEY, ITERATOR_KEY, RNG_KEY = "resume.lr_scheduler", "resume.data_iterator", "resume.rng_state"


def optimizer_key(state: str, model_key: str) -> str:
    return f"optimizer.state.{state}.{model_key}"


# Megatron-Core's local layer spec renames its separate norms in the sharded
# state dict (sharded_state_dict_keys_map of get_gpt_layer_local_submodules,
# megatron/core/models/gpt/gpt_layer_specs.py); its Transformer Engine spec
# registers the same keys (the norms fused into linear_qkv / linear_fc1).
MCORE_KEYS_MAP = (("input_layernorm.", "self_attention.linear_qkv.layer_norm_"),
                  ("pre_mlp_layernorm.", "mlp.linear_fc1.layer_norm_"))


def checkpoint_key(name: str) -> str:
    """The checkpoint key of parameter `name` (Megatron-Core's and ckpt's)."""
    head, sep, rest = name.partition("decoder.layers.")
    layer, _, tail = rest.partition(".")
    for old, new in MCORE_KEYS_MAP if sep else ():
        if tail.startswith(old):
            return f"{head}decoder.layers.{layer}.{new}{tail[len(old):]}"
    return name


@functools.lru_cache(maxsize=64)
def _descriptors(config_json: str, tp: int, dp: int, rank: int) -> tuple:
    """ckpt's descriptors of `rank` (ckpt.model_shards, family "megatron_gpt")."""
    from .ckpt_io import import_ckpt  # noqa: PLC0415 (ckpt_io imports this module)
    ckpt = import_ckpt()
    return tuple(ckpt.model_shards(json.loads(config_json), f"tp={tp},dp={dp}", rank, family="megatron_gpt"))


def _view(t: torch.Tensor, d: dict) -> torch.Tensor:
    """The slice of local tensor `t` (a parameter's shape) that descriptor `d`
    describes: param_offset elements in, local_shape - a view, so loading
    writes into `t`."""
    if tuple(t.shape) != tuple(d["param_shape"]):
        raise ValueError(f"{d['param']}: local shape {tuple(t.shape)}, ckpt's rules say {tuple(d['param_shape'])}")
    n = math.prod(d["local_shape"])
    return t.view(-1)[d["param_offset"]:d["param_offset"] + n].view(tuple(d["local_shape"]))


def model_shards(model, source=lambda name, p: p, naive_fc1: bool = False,
                 key=lambda k: k) -> list[TensorShard]:
    """Shards of every parameter of `model` by ckpt's rules; `source(name, p)`
    picks the tensor described (the parameter, its grad, an optimizer moment),
    `key(k)` the key it is stored under. naive_fc1: the negative control, fc1
    as one plain axis-0 slice (the gate and up halves mix at another TP)."""
    ps, params = model.ps, dict(model.named_parameters())
    descs = _descriptors(json.dumps(model_config_json(model.cfg), sort_keys=True), ps.tp, ps.dp, ps.rank)
    if {d["param"] for d in descs} != set(params):
        raise ValueError(f"ckpt's rules describe parameters {sorted({d['param'] for d in descs} ^ set(params))} "
                         "that this model does not match")
    out, naive_done = [], set()
    for d in descs:
        t = source(d["param"], params[d["param"]])
        if naive_fc1 and d["key"].endswith("linear_fc1.weight"):
            if d["param"] not in naive_done:
                naive_done.add(d["param"])
                out.append(from_rank_offsets(key(d["key"]), t, (0, ps.tp_rank, ps.tp), replica_id=tuple(d["replica_id"])))
            continue
        out.append(TensorShard(key(d["key"]), _view(t, d), tuple(d["global_shape"]), tuple(d["global_offset"]),
                               tuple(d["replica_id"]), bool(d["allow_shape_mismatch"])))
    return out


def optimizer_shards(model, opt: AdamW, naive_fc1: bool = False) -> list[TensorShard]:
    ps = model.ps
    sources = {"fp32_param": lambda n, p: p.data, "exp_avg": lambda n, p: opt.exp_avg[n],
               "exp_avg_sq": lambda n, p: opt.exp_avg_sq[n]}
    out = []
    for state in ADAM_STATES:
        out += model_shards(model, sources[state], naive_fc1, key=functools.partial(optimizer_key, state))
    out.append(from_rank_offsets(STEP_KEY, opt.step_tensor,
                                 replica_id=(ps.pp_rank, ps.tp_rank, ps.dp_rank)))
    return out


def merged_ledger(sampler: PretrainingSampler, ps: ParallelState) -> SampleLedger:
    """The sampler ledger merged over the DP group (collective when dp > 1)."""
    parts = [None] * ps.dp
    if ps.dp_group is None:
        parts = [(sampler.ledger.count, sampler.ledger.digest)]
    else:
        dist.all_gather_object(parts, (sampler.ledger.count, sampler.ledger.digest),
                               group=ps.dp_group)
    total = SampleLedger()
    for count, digest in parts:
        total.merge(SampleLedger(count, digest))
    return total


def object_shards(ps: ParallelState, model_cfg: GPTConfig, train_cfg: TrainConfig,
                  iteration: int, sched: LrScheduler, sampler: PretrainingSampler,
                  rng: RngState) -> list[ObjectShard]:
    rep = (ps.pp_rank, ps.tp_rank, ps.dp_rank)
    one = lambda key, obj: ObjectShard(key, obj, (1,), (0,), rep)
    return [
        one(ARGS_KEY, {"model": model_cfg.to_json(), "train": train_cfg.to_json()}),
        one(PROGRESS_KEY, {"iteration": iteration}),
        one(LR_KEY, sched.state_json()),
        one(ITERATOR_KEY, sampler.state_json(merged_ledger(sampler, ps))),
        ObjectShard(RNG_KEY, rng.state_json(), (ps.pp, ps.tp), (ps.pp_rank, ps.tp_rank),
                    (0, 0, ps.dp_rank)),
    ]


def sharded_state_dict(model, optimizer: AdamW, sched: LrScheduler,
                       sampler: PretrainingSampler, rng: RngState, *,
                       train_cfg: TrainConfig, iteration: int, naive_fc1: bool = False) -> dict:
    """{key-ordered name: TensorShard | ObjectShard} for this rank: model,
    optimizer, step, and the resume objects. Two fc1 shards share a key, so the
    dict's names are "<key>" or "<key>#<i>" for the i-th extra shard.
    naive_fc1: the negative control (fc1 as one plain axis-0 slice)."""
    entries = model_shards(model, naive_fc1=naive_fc1) + optimizer_shards(model, optimizer,
                                                                           naive_fc1)
    entries += object_shards(model.ps, model.cfg, train_cfg, iteration, sched, sampler, rng)
    out: dict = {}
    for e in entries:
        name, i = e.key, 1
        while name in out:
            name, i = f"{e.key}#{i}", i + 1
        out[name] = e
    return out


def model_config_json(cfg: GPTConfig) -> dict:
    """The config of ckpt's family "megatron_gpt" (reshard/gpt_config_json.cc GptConfigToJson)."""
    return {"vocab_size": cfg.vocab_size, "hidden": cfg.hidden, "ffn_hidden": cfg.ffn_hidden,
            "num_layers": cfg.num_layers, "num_heads": cfg.num_heads,
            "num_query_groups": cfg.num_query_groups, "kv_channels": cfg.kv_channels,
            "swiglu": cfg.swiglu, "tied_embeddings": cfg.tied_embeddings,
            "add_bias_linear": False, "qkv_bias": False,
            "make_vocab_size_divisible_by": cfg.make_vocab_size_divisible_by, "dtype": "fp32",
            "first_stage_layers": -1, "last_stage_layers": -1, "stack_layers": False,
            "num_experts": 0, "moe_ffn_hidden": 0, "norm_keys": "local"}


def checkpoint_metadata(cfg: GPTConfig, ps: ParallelState) -> dict:
    """Manifest metadata: "model" (family and config, reshard/family.h) and
    "layout" let ckpt's C++ tools rebuild the layout rules; "optimizer" as
    ckpt's ckpt/workload/gpt_job.cc OptimizerMetadata."""
    model = {"family": "megatron_gpt", "config": model_config_json(cfg), "name": "torch_gpt"}
    return {"model": model, "layout": ps.layout_json(),
            "optimizer": {"format": "model", "bucket_elems": 0, "states": list(ADAM_STATES)}}
