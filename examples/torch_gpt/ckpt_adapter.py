"""torch_gpt's state through ckpt's torch bridge (ckpt.TorchState): what a user
of a Megatron-style model writes - a TP rule table, a key map, and the job's
own values. The `ckpt` module is passed in (imported lazily by ckpt_io).

The format is the one state.py documents (ckpt's model-space keys, MCore's
sharding): model tensors by the rules below; "optimizer.state.<s>.<key>" for
s in fp32_param, exp_avg, exp_avg_sq (AdamW.state) with their parameter's
sharding; "optimizer.step"; the resume objects; "resume.rng_state" on a
(pp, tp) grid. The bridge adds "optimizer.param_groups" (hyper-parameters).
"""
from __future__ import annotations

from .state import (ARGS_KEY, ITERATOR_KEY, LR_KEY, PROGRESS_KEY, RNG_KEY, STEP_KEY, checkpoint_key,
                    checkpoint_metadata, merged_ledger)

RESUME_KEYS = (ARGS_KEY, PROGRESS_KEY, LR_KEY, ITERATOR_KEY, RNG_KEY)


def tp_rules(ckpt, swiglu: bool, naive_fc1: bool = False) -> dict:
    """Megatron's TP layout of this model; naive_fc1: the negative control (fc1 as
    one plain axis-0 slice: the gate and up halves mix at another TP)."""
    tb = ckpt.torch_bridge
    return {"embedding.word_embeddings.weight": tb.Split(0, allow_shape_mismatch=True),
            "output_layer.weight": tb.Split(0, allow_shape_mismatch=True),
            "*.linear_qkv.weight": 0, "*.linear_proj.weight": 1, "*.linear_fc2.weight": 1,
            "*.linear_fc1.weight": tb.GatedSplit(0) if swiglu and not naive_fc1 else 0}


def torch_state(job, ckpt, rng: bool = True, iterator: bool = True):
    """The job's whole state as a ckpt.TorchState. Collective over DP (the
    sampler ledger is merged). rng / iterator False leave those objects out."""
    ps = job.ps
    extra = {STEP_KEY: job.opt.step_tensor,
             ARGS_KEY: {"model": job.model_cfg.to_json(), "train": job.train_cfg.to_json()},
             PROGRESS_KEY: {"iteration": job.iteration}, LR_KEY: job.sched.state_json()}
    ledger = merged_ledger(job.sampler, ps)
    if iterator:
        extra[ITERATOR_KEY] = job.sampler.state_json(ledger)
    if rng:  # per (pp, tp) rank, identical over DP (rng.py)
        extra[RNG_KEY] = ckpt.ShardedObject(RNG_KEY, job.rng.state_json(), (ps.pp, ps.tp), (ps.pp_rank, ps.tp_rank),
                                            (0, 0, ps.dp_rank))
    tp = ckpt.TensorParallel(ps.tp_rank, ps.tp, dp_rank=ps.dp_rank,
                             rules=tp_rules(ckpt, job.model_cfg.swiglu, job.naive_fc1))
    return ckpt.TorchState(job.model, job.opt, extra=extra, extra_prefix="", rng=False, tp=tp, keys=checkpoint_key)


def save(job, ckpt, state, root: str, comm=None, is_async: bool = False, compress=None, timeout=None):
    """ckpt.save_state (or async_save_state, returning its handle) at the job's
    iteration, with the GPT config and layout in the metadata; `timeout`: ckpt's
    collective deadline in seconds (None: ckpt's default, 60 s)."""
    fn = ckpt.async_save_state if is_async else ckpt.save_state
    kwargs = {"compress": compress} if compress else {}
    if timeout is not None:
        kwargs["timeout"] = timeout
    return fn(state, root, job.iteration, comm=comm, metadata=checkpoint_metadata(job.model_cfg, job.ps),
              layout=job.ps.layout_json(), **kwargs)


def load(job, ckpt, state, root: str, iteration=None, comm=None, partial: bool = False) -> None:
    """ckpt.load_state in place, then the resume objects applied to the job.
    partial: the request leaves some objects out on purpose (the RNG at another
    TP, a negative control), so the checkpoint may hold keys not asked for."""
    from .train import restore_objects
    ckpt.load_state(state, root, iteration, comm=comm, strict="assume_ok_unexpected" if partial else "all")
    restore_objects(job, {k: v for k, v in state.extra.items() if k in RESUME_KEYS}, RNG_KEY in state.extra)
