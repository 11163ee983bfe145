"""Training entry point: python3 -m torch_gpt.train [options]

Under mpirun:  mpirun -np 4 /usr/bin/python3 -m torch_gpt.train --tp 2 ...
Under spawn:   python3 -m torch_gpt.launch --nproc 4 -- --tp 2 ...
The world size comes from the launcher; dp = world / tp (pp = 1). The run
trains until iteration --steps (so a resumed run continues to the same end),
logs one JSON line per step on rank 0 (--log; the loss also as float.hex for
bitwise comparisons), and can save/load the pure-PyTorch reference checkpoint
(--save-ref / --load-ref; the ckpt library replaces it later).

Determinism: one thread, torch.use_deterministic_algorithms(True), the
TP-independent global init, seeded per-rank generators (rng.py) and a
fixed-order DP all-reduce make two runs at one layout bitwise equal.
--nondeterministic is the other path (a GPU job's atomicAdd kernels): the
embedding gradient is accumulated in a random order every step, so two runs
differ in the last bits and only an approximate loss test can compare them.
--hash-activations PATH hashes the forward pass of each step (probe.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from dataclasses import dataclass

import torch

from . import dist_env
from .config import GPTConfig, TrainConfig, preset
from .data import ByteDataset, PretrainingSampler, load_corpus
from .model import GPTModel
from .optim import AdamW, LrConfig, LrScheduler, average_dp_grads, clip_grad_norm
from .parallel import ParallelState, all_reduce, build_parallel_state
from .reference import global_init, load_reference, save_reference, scatter_global
from .rng import RngState
from .state import (ARGS_KEY, ITERATOR_KEY, LR_KEY, PROGRESS_KEY, RNG_KEY, checkpoint_metadata,
                    model_shards, sharded_state_dict)


def set_deterministic() -> None:
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)


@dataclass
class Job:
    model: GPTModel
    opt: AdamW
    sched: LrScheduler
    sampler: PretrainingSampler
    rng: RngState
    dataset: ByteDataset
    ps: ParallelState
    model_cfg: GPTConfig
    train_cfg: TrainConfig
    iteration: int = 0
    naive_fc1: bool = False  # negative control: describe fc1 with the naive split
    hasher: object = None    # probe.ActivationHasher under --hash-activations


def build_job(model_cfg: GPTConfig, train_cfg: TrainConfig, ps: ParallelState) -> Job:
    rng = RngState(train_cfg.seed, ps)
    model = GPTModel(model_cfg, ps, rng)
    scatter_global(model_shards(model), global_init(model_cfg, train_cfg.seed))
    opt = AdamW(model.named_parameters(), betas=(train_cfg.beta1, train_cfg.beta2),
                eps=train_cfg.eps, weight_decay=train_cfg.weight_decay)
    sched = LrScheduler(LrConfig(train_cfg.max_lr, train_cfg.min_lr, train_cfg.warmup_steps,
                                 train_cfg.decay_steps, train_cfg.lr_style))
    dataset = ByteDataset(load_corpus(train_cfg.data_files), model_cfg.seq_length,
                          train_cfg.data_seed)
    sampler = PretrainingSampler(len(dataset), train_cfg.micro_batch, train_cfg.global_batch,
                                 ps.dp_rank, ps.dp)
    return Job(model, opt, sched, sampler, rng, dataset, ps, model_cfg, train_cfg)


def train_step(job: Job) -> dict:
    """One global batch: micro-batch gradient accumulation, DP average, clip, AdamW."""
    micro = job.sampler.next_global_batch()
    job.model.train()
    job.opt.zero_grad()
    loss_sum = torch.zeros(1)
    for n, ids in enumerate(micro):
        tokens, targets = job.dataset.batch(ids)
        if job.hasher and n == 0:
            job.hasher.arm()
        loss = job.model.loss(tokens, targets) / len(micro)
        if job.hasher and n == 0:
            job.hasher.disarm(job.iteration + 1)
        loss.backward()
        loss_sum += loss.detach()
    params = list(job.opt.params.values())
    average_dp_grads(params, job.ps)
    grad_norm = clip_grad_norm(list(job.opt.params.items()), job.train_cfg.clip_grad, job.ps)
    lr = job.sched.lr()
    job.opt.step(lr)
    job.sched.step()
    job.iteration += 1
    loss = float(all_reduce(loss_sum, job.ps.dp_group) / job.ps.dp)
    return {"iteration": job.iteration, "loss": loss, "loss_hex": loss.hex(),
            "first_sample": micro[0][0] if micro and micro[0] else None,
            "grad_norm": grad_norm, "lr": lr, "consumed_samples": job.sampler.consumed_samples}


def state_dict(job: Job) -> dict:
    return sharded_state_dict(job.model, job.opt, job.sched, job.sampler, job.rng,
                              train_cfg=job.train_cfg, iteration=job.iteration,
                              naive_fc1=job.naive_fc1)


def restore_objects(job: Job, objs: dict, use_rng: bool = True) -> None:
    """Applies loaded resume objects (tensors were loaded in place already)."""
    saved_model = objs[ARGS_KEY]["model"]
    if saved_model != job.model_cfg.to_json():
        raise ValueError(f"model config differs from the checkpoint's: {saved_model}")
    job.iteration = int(objs[PROGRESS_KEY]["iteration"])
    if job.opt.step_count != job.iteration:
        raise ValueError(f"checkpoint iteration {job.iteration} holds optimizer step "
                         f"{job.opt.step_count}")
    job.sched.load_json(objs[LR_KEY])
    if ITERATOR_KEY in objs:
        job.sampler.load_json(objs[ITERATOR_KEY])
    elif job.ps.rank == 0:
        print("no data iterator state loaded: the sampler starts from sample 0 "
              "(samples are repeated)", file=sys.stderr)
    if use_rng and RNG_KEY in objs:
        job.rng.load_json(objs[RNG_KEY])
    elif use_rng and job.ps.rank == 0:
        print("no RNG state for this (pp, tp) grid in the checkpoint (TP changed?): "
              "continuing with fresh generators, not bitwise", file=sys.stderr)


def checkpointer(a: argparse.Namespace, ps: ParallelState):
    """A ckpt_io.Checkpointer when a ckpt option is given, else None (no import)."""
    if not (a.save or a.load):
        return None
    from .ckpt_io import Checkpointer
    ck = Checkpointer(ps, save_dir=a.save, interval=a.save_interval, async_save=a.async_save,
                      comm=a.ckpt_comm, stats_log=a.ckpt_stats, timeout=a.ckpt_timeout)
    if a.hold_before_save:
        rank, secs = a.hold_before_save.split(":")
        ck.hold = (int(rank), float(secs))
    return ck


def periodic_save(ck, job: Job, a: argparse.Namespace) -> None:
    if a.async_save and a.sync_copy:
        ck.save(job, a.sync_copy, sync=True)  # the reference the async save must equal
    ck.save(job)


def steps_and_saves(job: Job, ck, a: argparse.Namespace, rec: dict, log) -> None:
    """After a step: its log line (rank 0) and the saves due."""
    if job.ps.rank == 0:
        print(f"iter {rec['iteration']:4d} loss {rec['loss']:.6f} grad_norm "
              f"{rec['grad_norm']:.4f} lr {rec['lr']:.3e}", flush=True)
        if log:
            log.write(json.dumps(rec) + "\n")
            log.flush()
    if a.local_dir:
        ck.tier_save(job)
    elif ck and a.save and a.save_interval and job.iteration % a.save_interval == 0:
        periodic_save(ck, job, a)


def parse_args(argv: list[str]) -> tuple[GPTConfig, TrainConfig, argparse.Namespace]:
    ap = argparse.ArgumentParser(prog="python3 -m torch_gpt.train")
    ap.add_argument("--model", default="tiny", help="preset: tiny | small")
    ap.add_argument("--tied", action="store_true", help="tie output layer to the embedding")
    ap.add_argument("--dropout", type=float, default=0.0, help="attention and hidden dropout")
    ap.add_argument("--vocab-divisible-by", type=int, default=None)
    ap.add_argument("--seq-length", type=int, default=None)
    t = TrainConfig()
    for f in dataclasses.fields(TrainConfig):
        if f.name != "data_files":
            ap.add_argument("--" + f.name.replace("_", "-"), type=type(getattr(t, f.name)),
                            default=getattr(t, f.name))
    ap.add_argument("--data-files", nargs="*", default=[])
    ap.add_argument("--log", default=None, help="rank 0 appends one JSON line per step")
    ap.add_argument("--save-ref", default=None, help="reference checkpoint file written at the end")
    ap.add_argument("--load-ref", default=None, help="reference checkpoint file to resume from")
    ap.add_argument("--no-rng-state", action="store_true", help="resume without RNG state")
    ap.add_argument("--nondeterministic", action="store_true",
                    help="unordered embedding-gradient accumulation (a GPU's atomicAdd): reruns differ")
    ap.add_argument("--hash-activations", default=None,
                    help="rank 0 appends the forward pass's activation hashes per step (probe.py)")
    c = ap.add_argument_group("ckpt checkpoints (ckpt_io.py)")
    c.add_argument("--save", default=None, help="ckpt root to save into (and at the end)")
    c.add_argument("--save-interval", type=int, default=0, help="save every K iterations")
    c.add_argument("--async-save", action="store_true", help="ckpt.async_save from the loop")
    c.add_argument("--sync-copy", default=None,
                   help="before each async save, a synchronous save of the same step here")
    c.add_argument("--load", default=None, help="ckpt root to resume from (any layout)")
    c.add_argument("--load-iter", type=int, default=None, help="iteration (default: latest)")
    c.add_argument("--no-load-rng", action="store_true", help="do not load the RNG state")
    c.add_argument("--no-load-iterator", action="store_true",
                   help="negative control: do not load the data iterator position")
    c.add_argument("--naive-fc1", action="store_true",
                   help="negative control: save/load SwiGLU fc1 as one plain axis-0 slice")
    c.add_argument("--save-after-load", default=None,
                   help="right after loading, save the loaded state here (fingerprint check)")
    c.add_argument("--local-dir", default=None,
                   help="two tiers (ckpt.TieredCheckpointer): node-local dir ({node}: node index); "
                        "--save is the global tier; resumes from the newest complete tier at start")
    c.add_argument("--local-every", type=int, default=1, help="with --local-dir: local save every K")
    c.add_argument("--global-every", type=int, default=0,
                   help="with --local-dir: global save every M, drained from the local copy (0: never)")
    c.add_argument("--replicas", type=int, default=1, help="with --local-dir: copies on other nodes")
    c.add_argument("--ranks-per-node", type=int, default=1, help="with --local-dir: node = rank // this")
    c.add_argument("--ckpt-comm", default="torch", help="ckpt control plane: torch | mpi")
    c.add_argument("--ckpt-stats", default=None, help="rank 0 appends one JSON line per save/load")
    c.add_argument("--ckpt-timeout", type=float, default=None,
                   help="ckpt's collective deadline for saves, seconds (default ckpt's 60): how long the "
                        "survivors of a lost node wait before naming the lost ranks and their hosts")
    c.add_argument("--hold-before-save", default=None, metavar="RANK:SECONDS",
                   help="test hook: that rank sleeps this long in each save, after the others entered "
                        "ckpt's (a slow or lost node; tests/cluster)")
    a = ap.parse_args(argv)
    if a.local_dir and not a.save:
        ap.error("--local-dir needs --save (the global tier)")
    m = preset(a.model)
    m.tied_embeddings = a.tied
    m.attention_dropout = m.hidden_dropout = a.dropout
    if a.vocab_divisible_by:
        m.make_vocab_size_divisible_by = a.vocab_divisible_by
    if a.seq_length:
        m.seq_length = a.seq_length
    tc = TrainConfig(**{f.name: getattr(a, f.name) for f in dataclasses.fields(TrainConfig)})
    return m, tc, a


def main(argv: list[str] | None = None) -> None:
    dist_env.map_ompi_env()  # mpirun shim; no-op under torchrun-style launchers
    set_deterministic()
    model_cfg, train_cfg, a = parse_args(sys.argv[1:] if argv is None else argv)
    rank, world = dist_env.init_from_env()
    ps = build_parallel_state(train_cfg.tp, rank, world)
    job = build_job(model_cfg, train_cfg, ps)
    job.naive_fc1 = a.naive_fc1
    job.model.embedding.word_embeddings.nondeterministic = a.nondeterministic
    if a.hash_activations:
        from .probe import ActivationHasher
        job.hasher = ActivationHasher(job.model, ps, a.hash_activations)
    if a.load_ref:
        restore_objects(job, load_reference(a.load_ref, state_dict(job)), not a.no_rng_state)
    ck = checkpointer(a, ps)
    if a.load:
        rec = ck.load(job, a.load, a.load_iter, use_rng=False if a.no_load_rng else "auto",
                      use_iterator=not a.no_load_iterator)
        if rank == 0:
            print(f"loaded iteration {job.iteration} from {a.load} (saved layout "
                  f"{rec['saved_layout']}, RNG {'loaded' if rec['rng_loaded'] else 'NOT loaded'}"
                  f"): {rec['bytes'] / 1e6:.1f} MB in {rec['seconds']:.3f} s", flush=True)
        if a.save_after_load:
            ck.save(job, a.save_after_load, sync=True)
    if a.local_dir:
        ck.enable_tiers(job, a.local_dir, a.local_every, a.global_every, a.replicas, a.ranks_per_node)
        choice = ck.tier_resume(job)
        if rank == 0:
            print(f"tiers: resumed from {choice['tier']} iteration {choice['iteration']}: {choice['why']}",
                  flush=True)
    if ck and a.save:
        ck.reserve(job)  # async saves: the arena now, so the first save does not stall
    log = open(a.log, "a") if a.log and rank == 0 else None
    t0, start_iter = time.monotonic(), job.iteration
    while job.iteration < train_cfg.steps:
        try:
            rec = train_step(job)
            steps_and_saves(job, ck, a, rec, log)
        except Exception:
            if ck:  # a peer lost: the async save in flight names it by ckpt's deadline
                ck.report_pending()
            raise
    saved_last = a.local_dir or (a.save_interval and job.iteration % a.save_interval == 0)
    if ck and a.save and job.iteration > start_iter and not saved_last:
        ck.save(job)  # the final state, as Megatron saves at the end of training
    if ck:
        ck.close()
    if rank == 0:
        print(f"done: {job.iteration} iterations, tp={ps.tp} dp={ps.dp}, "
              f"{time.monotonic() - t0:.1f} s", flush=True)
    if a.save_ref:
        save_reference(a.save_ref, state_dict(job), model_cfg.vocab_size,
                       checkpoint_metadata(model_cfg, ps))
    if log:
        log.close()
    if job.hasher:
        job.hasher.close()
    dist_env.shutdown()


if __name__ == "__main__":
    main()
