"""Model-family rules from the C++ library (reshard/family.h), so Python code
does not copy them: the ShardedTensor descriptors a rank registers for a model
config and a parallel layout.

    shards = ckpt.model_shards(gpt_config, "tp=2,pp=2", rank=3)
    # [{"key", "dtype", "global_shape", "global_offset", "local_shape", "replica_id",
    #   "allow_shape_mismatch", "param", "param_shape", "param_offset", "extra_state"}, ...]

`config` is the dict recorded in a checkpoint's metadata: the "config" of
"model": {"family", "config"} (checkpoints written before the family seam
record a "megatron_gpt" config under "gpt").
"""
import json

from . import _ckpt


def model_families():
    """Names of the registered model families (e.g. ["megatron_gpt"])."""
    return list(_ckpt.model_families())


def model_config(config, family="megatron_gpt"):
    """The family's canonical form of `config` (defaults filled); raises InvalidArgumentError."""
    return json.loads(_ckpt.model_config(family, json.dumps(config)))


def model_shards(config, layout, rank, family="megatron_gpt"):
    """Descriptors (dicts, module order) of `rank` of `layout` ("tp=2,pp=2,dp=1")."""
    return list(_ckpt.model_shards(family, json.dumps(config), layout, int(rank)))
