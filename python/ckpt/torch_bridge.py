"""PyTorch state -> ckpt descriptors and back: no hand-written ShardedTensor.

    state = ckpt.TorchState(model, optimizer, extra={"step": 0}, comm=comm)
    ckpt.save_state(state, root, iteration, comm=comm)
    ckpt.load_state(state, root, comm=comm)   # model, optimizer, extra, RNG in place

What a TorchState describes (keys as ckpt's model-space format, so the C++
tools and a Megatron job see the same names):
  model.state_dict()      "<name>"                      tensors, in place, zero copy
  optimizer.state_dict()  "optimizer.state.<s>.<param name>" for each per-param
                          tensor s (exp_avg, momentum_buffer, step, ...) with
                          its parameter's sharding when it has the parameter's
                          shape, whole otherwise; non-tensor values and
                          "optimizer.param_groups" (hyper-parameters) as objects
  extra                   "extra.<k>": a tensor whole, anything else pickled;
                          load updates the caller's dict in place. A value
                          that is a ShardedObject / ShardedTensor is used as
                          it is (an object on a grid of its own, e.g. a
                          per-(pp, tp) RNG state); extra_prefix="" keys the
                          entries "<k>" (a job whose format names them)
  RNG (rng=True)          "rng": torch CPU, CUDA (where present), numpy
                          and python `random` states of each rank, one object
                          cell per rank of the comm, grid (W,). A load at
                          another world size restores everything else and
                          leaves the RNG as it is, with an RngNotRestoredWarning
                          (rank r's stream has no counterpart when the ranks
                          change); rng=False leaves it out on purpose
A 0-dim tensor is described through a 1-element view of its storage.

Sharding. Without a TP rule every tensor is replicated over the comm's W ranks
(DP = W): the replica id is the rank, so rank 0 writes each tensor once and
every rank loads all of it. With `tp=ckpt.TensorParallel(rank, size, dp_rank,
rules)` a parameter is split when a rule names it (fnmatch pattern -> axis,
or -> a callable(key, tensor, tp) returning descriptors, for layouts such as
Megatron's SwiGLU fc1), or when it carries Megatron's attributes
`tensor_model_parallel=True, partition_dim=axis` (declare a whole module once
with ckpt.mark_tensor_parallel(module, axis)); every other tensor is
TP-replicated. Replica ids are (tp_rank or 0, dp_rank). Rules for Megatron's layouts:
ckpt.torch_bridge.Split(axis, allow_shape_mismatch=True) for a padded
vocabulary, GatedSplit(axis) for SwiGLU's fused [W_r; V_r] fc1. keys=callable
maps a state_dict name to its checkpoint key (MCore's
sharded_state_dict_keys_map, e.g. input_layernorm. -> self_attention.
linear_qkv.layer_norm_), for model and optimizer entries alike.

Optimizer state is created lazily by torch.optim (at the first step). Before a
load, an optimizer without state is materialised as PyTorch DCP does
(_init_optim_state): zero gradients and one step with lr = 0. For torch.optim's
optimizers that step leaves the parameters bitwise unchanged (their updates
and weight decay scale by lr: p * (1 - 0) and p + (-0) * u are p) and only
creates the state tensors, which the load then overwrites; caller gradients are
kept. State of a parameter that the checkpoint holds none for (it never had a
gradient when saved) is dropped again after the load, so the resumed optimizer
equals the saved one.

Megatron-Core: a dict from MCore's `sharded_state_dict()` (its ShardedTensor /
ShardedObject, duck-typed) becomes ckpt's descriptors with from_megatron().
"""
import fnmatch
import random
import warnings

import numpy as np
import torch

from ._descriptors import ShardedObject, ShardedTensor, flatten

OPT_PREFIX = "optimizer.state."
GROUPS_KEY = "optimizer.param_groups"
RNG_KEY = "rng"


class RngNotRestoredWarning(UserWarning):
    """load_state left the RNG state as it was: the checkpoint's per-rank RNG
    streams were saved at another world size, so they have no counterpart here."""


class TensorParallel:
    """This rank's TP coordinates and the rules naming split parameters:
    rules = {fnmatch pattern over parameter names: axis | Split | GatedSplit |
    callable(key, tensor, tp) -> [ShardedTensor]}."""

    def __init__(self, rank, size, dp_rank=0, rules=None):
        self.rank, self.size, self.dp_rank = int(rank), int(size), int(dp_rank)
        self.rules = dict(rules or {})
        if not 0 <= self.rank < self.size:
            raise ValueError(f"ckpt: tp rank {rank} not in [0, {size})")

    def rule_for(self, name, param):
        for pattern, rule in self.rules.items():
            if fnmatch.fnmatchcase(name, pattern):
                return rule
        if param is not None and getattr(param, "tensor_model_parallel", False):
            return int(getattr(param, "partition_dim", 0))
        return None


class Split:
    """A TP rule: the local tensor is block tp.rank of tp.size on `axis`.
    allow_shape_mismatch: the global size on that axis may differ between the
    saving and the loading job (a vocabulary padded per TP size: a load reads
    the overlap and zero-fills the rest), as MCore's allow_shape_mismatch."""

    def __init__(self, axis, allow_shape_mismatch=False):
        self.axis, self.allow_shape_mismatch = int(axis), bool(allow_shape_mismatch)

    def __call__(self, key, t, tp):
        return [ShardedTensor.from_rank_offsets(key, t, (self.axis, tp.rank, tp.size), replica_id=(0, tp.dp_rank),
                                                allow_shape_mismatch=self.allow_shape_mismatch)]


class GatedSplit:
    """A TP rule for a fused gated projection (Megatron's SwiGLU linear_fc1):
    the local tensor is [W_r; V_r] on `axis`, and the global one [W; V] - so
    its two halves are blocks r and tp + r of 2 * tp (two shards of one key,
    views of the local tensor: a load writes into it). A plain Split would
    mix the gate and up halves at another TP size."""

    def __init__(self, axis=0):
        self.axis = int(axis)

    def __call__(self, key, t, tp):
        w, v = t.chunk(2, dim=self.axis)
        return [ShardedTensor.from_rank_offsets(key, w, (self.axis, tp.rank, 2 * tp.size), replica_id=(0, tp.dp_rank)),
                ShardedTensor.from_rank_offsets(key, v, (self.axis, tp.size + tp.rank, 2 * tp.size),
                                                replica_id=(0, tp.dp_rank))]


def mark_tensor_parallel(module, axis):
    """Declares every parameter of `module` split on `axis` over TP (Megatron's
    tensor_model_parallel / partition_dim attributes)."""
    for p in module.parameters():
        p.tensor_model_parallel, p.partition_dim = True, int(axis)
    return module


def _flat_view(t):
    return t.view(1) if t.dim() == 0 else t


class TorchState:
    """A model, its optimizer, plain values and RNG state as one ckpt state."""

    def __init__(self, model=None, optimizer=None, extra=None, rng=True, comm=None, tp=None, keys=None,
                 extra_prefix="extra."):
        self.model = getattr(model, "module", model) if _is_ddp(model) else model
        self.optimizer, self.extra, self.rng, self.tp = optimizer, extra, bool(rng), tp
        self.keys = keys or (lambda name: name)  # state_dict name -> checkpoint key
        self.extra_prefix = str(extra_prefix)
        self.rank = 0 if comm is None else int(comm.rank)
        self.world = 1 if comm is None else int(comm.size)

    # -- descriptors -------------------------------------------------------
    def _replica(self, split):
        if self.tp is None:
            return self.rank
        return (0 if split else self.tp.rank, self.tp.dp_rank)

    def _tensor(self, key, t, name=None, param=None):
        """The descriptors of live tensor t under key (param: its parameter, for the TP rule)."""
        rule = self.tp.rule_for(name, param) if (self.tp is not None and name is not None) else None
        if callable(rule):
            return list(rule(key, t, self.tp))
        if rule is None:
            return [ShardedTensor.from_rank_offsets(key, _flat_view(t), replica_id=self._replica(False))]
        return [ShardedTensor.from_rank_offsets(key, t, (int(rule), self.tp.rank, self.tp.size),
                                                replica_id=self._replica(True))]

    def _object(self, key, value):
        return ShardedObject(key, value, replica_id=self._replica(False))

    def _param_names(self):
        """{parameter: its state_dict name}."""
        names = {}
        if self.model is not None:
            for n, p in self.model.named_parameters():
                names.setdefault(p, n)
        return names

    def sharded_state_dict(self):
        """{key: ShardedTensor | ShardedObject | [those]} of the whole state, as it is now."""
        out = {}
        params = dict(self.model.named_parameters()) if self.model is not None else {}
        if self.model is not None:
            for name, v in self.model.state_dict().items():
                key = self.keys(name)
                out[key] = self._tensor(key, v, name, params.get(name)) if torch.is_tensor(v) \
                    else self._object(key, v)
        if self.optimizer is not None:
            out.update(self._optimizer_entries())
        if self.extra is not None:
            for k, v in self.extra.items():
                key = f"{self.extra_prefix}{k}"
                if isinstance(v, (ShardedObject, ShardedTensor)):
                    out[key] = v  # the caller's own descriptor
                else:
                    out[key] = self._tensor(key, v) if torch.is_tensor(v) else self._object(key, v)
        if self.rng:
            out[RNG_KEY] = ShardedObject(RNG_KEY, rng_state(), (self.world,), (self.rank,))
        return out

    def _optimizer_entries(self):
        names = self._param_names()
        out, groups = {}, []
        for gi, group in enumerate(self.optimizer.param_groups):
            pnames = []
            for p in group["params"]:
                if p not in names:
                    raise ValueError("ckpt: an optimizer parameter is not a parameter of the model "
                                     "(pass the model the optimizer was built over)")
                name = pnames.append(names[p]) or names[p]
                for s, v in self.optimizer.state.get(p, {}).items():
                    key = f"{OPT_PREFIX}{s}.{self.keys(name)}"
                    if torch.is_tensor(v):
                        same = tuple(v.shape) == tuple(p.shape)
                        out[key] = self._tensor(key, v, name if same else None, p if same else None)
                    else:
                        out[key] = self._object(key, v)
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": pnames})
        out[GROUPS_KEY] = self._object(GROUPS_KEY, groups)
        return out

    # -- load --------------------------------------------------------------
    def prepare_load(self, saved_keys=None):
        """Materialises lazily created optimizer state (see the module docstring).
        saved_keys: the checkpoint's keys; state the checkpoint lacks is dropped."""
        if self.optimizer is not None and not self.optimizer.state:
            materialize_optimizer_state(self.optimizer)
        if self.optimizer is not None and saved_keys is not None:
            names = self._param_names()
            have = {k[len(OPT_PREFIX):].split(".", 1)[1] for k in saved_keys if k.startswith(OPT_PREFIX)}
            for p in list(self.optimizer.state):
                if self.keys(names[p]) not in have:
                    del self.optimizer.state[p]

    def apply(self, objects):
        """Applies the loaded objects {key: value} (tensors were loaded in place)."""
        names = {self.keys(n): p for p, n in self._param_names().items()}  # checkpoint key -> parameter
        extra = {v.key if isinstance(v, (ShardedObject, ShardedTensor)) else f"{self.extra_prefix}{k}": k
                 for k, v in (self.extra or {}).items()}  # checkpoint key -> extra's key
        model_names = {self.keys(n): n for n in self.model.state_dict()} if self.model is not None else {}
        for key, value in objects.items():
            if key in extra:
                self.extra[extra[key]] = value
            elif key == GROUPS_KEY:
                _restore_groups(self.optimizer, value)
            elif key.startswith(OPT_PREFIX):
                s, name = key[len(OPT_PREFIX):].split(".", 1)
                self.optimizer.state[names[name]][s] = value
            elif key == RNG_KEY:
                set_rng_state(value)
            elif self.model is not None:  # a non-tensor model entry (e.g. _extra_state)
                self.model.load_state_dict({model_names.get(key, key): value}, strict=False)


def _is_ddp(model):
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


def _restore_groups(optimizer, groups):
    if len(groups) != len(optimizer.param_groups):
        raise ValueError(f"ckpt: the checkpoint's optimizer has {len(groups)} param groups, this one "
                         f"{len(optimizer.param_groups)}")
    for mine, saved in zip(optimizer.param_groups, groups):
        mine.update({k: v for k, v in saved.items() if k != "params"})


def materialize_optimizer_state(optimizer):
    """Creates a torch.optim optimizer's lazy state: zero grads, one step at lr 0
    (PyTorch DCP's _init_optim_state); the caller's gradients are restored."""
    saved_grads, lrs = {}, []
    for group in optimizer.param_groups:
        for p in group["params"]:
            saved_grads[p] = p.grad
            p.grad = torch.zeros_like(p) if p.requires_grad else None
        if "lr" in group:
            lrs.append(group["lr"])
            group["lr"] = 0.0
    try:
        optimizer.step()
    finally:
        for group in optimizer.param_groups:
            if "lr" in group:
                group["lr"] = lrs.pop(0)
        for p, g in saved_grads.items():
            p.grad = g


def rng_state():
    """This process's RNG states: torch CPU, CUDA (when initialised), numpy, python."""
    st = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        st["cuda"] = torch.cuda.get_rng_state_all()
    return st


def set_rng_state(st):
    torch.set_rng_state(st["torch"])
    np.random.set_state(st["numpy"])
    random.setstate(st["python"])
    if "cuda" in st and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


def flat_state(sharded):
    """{name: descriptor} for ckpt.save/load: lists of shards get names "<key>#<i>"."""
    out = {}
    for k, v in sharded.items():
        for i, d in enumerate(v if isinstance(v, list) else [v]):
            out[k if i == 0 else f"{k}#{i}"] = d
    return out


def save_state(state, root, iteration, comm=None, **kwargs):
    """ckpt.save of a TorchState (kwargs: those of ckpt.save). Collective."""
    from ._api import save
    return save(flat_state(state.sharded_state_dict()), root, iteration, comm=comm, **kwargs)


def async_save_state(state, root, iteration, comm=None, **kwargs):
    """ckpt.async_save of a TorchState (returns its handle). Collective."""
    from ._api import async_save
    return async_save(flat_state(state.sharded_state_dict()), root, iteration, comm=comm, **kwargs)


def load_state(state, root, iteration=None, comm=None, strict="all", **kwargs):
    """Loads a TorchState in place from `iteration` (None: the latest) and returns
    the iteration loaded. Requests every key the state has; strict="all" (the
    default) raises when the checkpoint and the state differ in keys. Collective."""
    from ._api import load
    from ._errors import CkptError
    from ._read import inspect
    try:
        info = inspect(root, iteration)
        state.prepare_load(set(info["tensors"]) | set(info["objects"]))
    except CkptError:
        if not kwargs.get("fallback"):
            raise
        state.prepare_load(None)  # the load falls back past an unreadable manifest
        info = None
    stats = kwargs.pop("stats", None)
    stats = {} if stats is None else stats
    request = flat_state(state.sharded_state_dict())
    if info is not None and state.rng and _rng_world(info) not in (None, state.world):
        request, strict = _without_rng(request, info, strict, state.world)
    loaded = load(request, root, iteration=iteration, comm=comm, strict=strict, stats=stats, **kwargs)
    out = loaded[0] if isinstance(loaded, tuple) else loaded
    state.apply({d.key: out[k] for k, d in request.items() if isinstance(d, ShardedObject)})
    return int(stats["iteration"])


def _rng_world(info):
    """The world size the checkpoint's RNG states were saved at (None: it has none)."""
    grid = info["objects"].get(RNG_KEY, {}).get("grid")
    return int(grid[0]) if grid and len(grid) == 1 else None


# A strict mode that raises on unexpected keys -> the same one that does not.
_NO_UNEXPECTED = {"all": "missing", "unexpected": "none", "raise_all": "missing", "raise_unexpected": "missing"}


def _without_rng(request, info, strict, world):
    """The request without the RNG, warning why; the checkpoint's "rng" is then
    the one key it holds that is not asked for (any other still raises)."""
    warnings.warn(f"ckpt: RNG state not restored: the checkpoint's per-rank RNG states were saved by "
                  f"{_rng_world(info)} ranks, this job has {world} (rank streams do not map across world "
                  "sizes); the RNG continues from this process's own state. Pass rng=False to leave "
                  "it out without this warning.", RngNotRestoredWarning, stacklevel=3)
    request = {k: d for k, d in request.items() if d.key != RNG_KEY}
    asked = {d.key for d in request.values()}
    others = (set(info["tensors"]) | set(info["objects"])) - asked - {RNG_KEY}
    return request, (strict if others else _NO_UNEXPECTED.get(strict, strict))


def from_megatron(sharded_state_dict):
    """A Megatron-Core sharded_state_dict (nested dicts/lists of its ShardedTensor
    and ShardedObject, duck-typed: no megatron import) as ckpt descriptors."""
    def conv(node):
        if isinstance(node, (ShardedTensor, ShardedObject)):
            return node
        if isinstance(node, dict):
            return {k: conv(v) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return type(node)(conv(v) for v in node)
        if hasattr(node, "global_shape") and hasattr(node, "key") and hasattr(node, "data"):
            if hasattr(node, "local_shape"):  # a ShardedTensor
                pre = int(getattr(node, "prepend_axis_num", 0) or 0)
                local = (1,) * pre + tuple(node.local_shape)
                fr = getattr(node, "flattened_range", None)
                return ShardedTensor(node.key, node.data, node.global_shape, node.global_offset, local,
                                     node.replica_id, None if fr is None else (fr.start, fr.stop),
                                     bool(getattr(node, "allow_shape_mismatch", False)))
            return ShardedObject(node.key, node.data, node.global_shape, node.global_offset, node.replica_id)
        if type(node).__name__ in ("ShardedTensorFactory", "LocalNonpersistentObject"):
            raise TypeError(f"ckpt: {type(node).__name__} is not supported: apply its build() first")
        return node
    out = conv(sharded_state_dict)
    flatten(out)
    return out
