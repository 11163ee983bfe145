"""The one place that maps torch_gpt's descriptors onto ckpt's Python API.

The API of the `ckpt` module used (python/ckpt, Megatron-Core dist_checkpointing
style; the module is passed in, never imported here, so tests can pass a stand-in):
  ckpt.ShardedTensor.from_rank_offsets(key, tensor, *(axis, rank_offset, num_parts),
                                       replica_id=tuple, allow_shape_mismatch=bool)
      global_shape[axis] = tensor.shape[axis] * num_parts,
      global_offset[axis] = tensor.shape[axis] * rank_offset (other axes: whole);
      `tensor` is a view of live state: load writes into it in place.
  ckpt.ShardedObject(key, obj, global_shape, global_offset, replica_id)
  ckpt.save(sharded_state_dict, root, iteration, comm=..., metadata=dict, layout=dict)
      collective; ckpt.async_save(same) -> handle (.wait(timeout), .start_stats)
  ckpt.load(sharded_state_dict, root, iteration=None, comm=...) -> dict     collective
      fills every ShardedTensor in place and returns a dict with the same names
      where each ShardedObject is replaced by its loaded object (MCore's load
      returns the state dict with loaded values the same way).
A state dict is a flat dict name -> ShardedTensor | ShardedObject; two entries
(SwiGLU W_r and V_r) may share one ckpt key under different names.
Objects are JSON-serialisable dicts; pass encode/decode (e.g. JSON bytes) if
ckpt's ShardedObject wants bytes.
"""
from __future__ import annotations

from .sharding import ObjectShard, TensorShard
from .state import RNG_KEY, checkpoint_metadata

_identity = lambda o: o


def to_ckpt(entries: dict, ckpt, encode=_identity) -> dict:
    out = {}
    for name, e in entries.items():
        if isinstance(e, TensorShard):
            out[name] = ckpt.ShardedTensor.from_rank_offsets(
                e.key, e.tensor, *e.rank_offsets, replica_id=e.replica_id,
                allow_shape_mismatch=e.allow_shape_mismatch)
        else:
            out[name] = ckpt.ShardedObject(e.key, encode(e.obj), e.global_shape,
                                           e.global_offset, e.replica_id)
    return out


def state_dict_entries(job, use_rng: bool = True) -> dict:
    """The job's descriptors (state.py); use_rng=False leaves the RNG state out."""
    from .train import state_dict
    entries = state_dict(job)
    if not use_rng:
        entries = {n: e for n, e in entries.items() if e.key != RNG_KEY}
    return entries


def save_entries(job, ckpt, entries: dict, root: str, comm=None, is_async: bool = False,
                 compress=None, encode=_identity):
    """ckpt.save (or ckpt.async_save, returning its handle) of `entries` at the
    job's iteration, with the GPT config and layout in the metadata."""
    fn = ckpt.async_save if is_async else ckpt.save
    kwargs = {"comm": comm, "metadata": checkpoint_metadata(job.model_cfg, job.ps),
              "layout": job.ps.layout_json()}  # the manifest's layout (`ckpt inspect`)
    if compress:
        kwargs["compress"] = compress
    return fn(to_ckpt(entries, ckpt, encode), root, job.iteration, **kwargs)


def load_entries(job, ckpt, entries: dict, root: str, iteration=None, comm=None,
                 use_rng: bool = True, decode=_identity, partial: bool = False) -> None:
    """ckpt.load of `entries` (tensors filled in place), then the resume objects
    that were requested are applied to the job. ckpt.load raises when the
    checkpoint holds keys not requested; a request that leaves some out on
    purpose (the RNG at another TP, a negative control) says so: partial=True."""
    from .train import restore_objects
    strict = {"strict": "assume_ok_unexpected"} if partial or not use_rng else {}
    loaded = ckpt.load(to_ckpt(entries, ckpt), root, iteration=iteration, comm=comm, **strict)
    objs = {e.key: decode(loaded[n]) for n, e in entries.items() if isinstance(e, ObjectShard)}
    restore_objects(job, objs, use_rng)


def save(job, ckpt, root: str, comm=None, encode=_identity) -> None:
    """Saves the job's full state at its current iteration (collective)."""
    save_entries(job, ckpt, state_dict_entries(job), root, comm, encode=encode)


def load(job, ckpt, root: str, iteration=None, comm=None, use_rng: bool = True,
         decode=_identity) -> None:
    """Loads into the job in place and restores its resume objects (collective).
    use_rng=False leaves the RNG state out of the request: required when the
    checkpoint's TP differs (its (pp, tp) grid has no cell for this rank)."""
    load_entries(job, ckpt, state_dict_entries(job, use_rng), root, iteration, comm, use_rng,
                 decode)
