"""ckpt: sharded, atomic, hash-checked checkpoints of PyTorch / numpy state.

    import ckpt
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", w, (0, tp_rank, tp_size))}
    ckpt.save(sd, root, iteration, comm=ckpt.TorchComm())
    ckpt.load(sd, root, comm=ckpt.TorchComm())     # in place, any TP/PP/DP layout

A torch model + optimizer without descriptors (torch_bridge.py):
    state = ckpt.TorchState(model, optimizer, extra={"step": 0}, comm=comm)
    ckpt.save_state(state, root, iteration, comm=comm); ckpt.load_state(state, root, comm=comm)
See README "Use it from PyTorch". The C++ library does the work (python/src);
tensors are read and written in place, never copied by the binding.
"""
import atexit as _atexit

from . import _ckpt
from ._hdf5 import add_plugin_path as _add_hdf5_plugin_path
from ._version import __version__
from ._api import AsyncSaveHandle, async_save, load, reserve_async_save, save, shutdown as _shutdown
from ._comm import MpiComm, TorchComm
from ._descriptors import ShardedObject, ShardedTensor
from ._errors import (AbortedError, AlreadyExistsError, CkptError, CkptIOError, CkptTimeoutError,
                      CorruptionError, FailedPreconditionError, InternalError, InvalidArgumentError,
                      NoSpaceError, NotFoundError, OutcomeUnknownError, UnimplementedError)
from ._convert import convert
from ._family import model_config, model_families, model_shards
from ._api import FallbackWarning
from ._read import Fingerprint, fingerprint, inspect, read_tensor, verify
from ._tensors import bf16_to_float32, float32_to_bf16
from ._manager import CheckpointManager, apply_retention, latest, list_iterations
from ._tiers import TieredCheckpointer
try:  # the torch bridge needs torch; numpy-only use goes without it
    from .torch_bridge import (RngNotRestoredWarning, TensorParallel, TorchState, async_save_state,
                               from_megatron, load_state, mark_tensor_parallel, save_state)
except ModuleNotFoundError as _e:
    if _e.name != "torch":
        raise

__all__ = ["TieredCheckpointer", "ShardedTensor", "ShardedObject", "save", "load", "async_save", "reserve_async_save", "AsyncSaveHandle", "MpiComm",
           "TorchComm", "inspect", "verify", "fingerprint", "Fingerprint", "read_tensor", "bf16_to_float32", "float32_to_bf16",
           "CkptError", "CkptTimeoutError", "NotFoundError", "CorruptionError", "AbortedError",
           "InvalidArgumentError", "FailedPreconditionError", "AlreadyExistsError", "CkptIOError",
           "NoSpaceError", "UnimplementedError", "InternalError", "OutcomeUnknownError"]
__all__ += ["FallbackWarning", "model_config", "model_families", "model_shards"]

_add_hdf5_plugin_path()  # h5py reads zstd shards after `import ckpt` (_hdf5.py)
_atexit.register(_shutdown)  # joins async saves, frees ckpt's MPI communicators; finalises MPI only if ckpt began it

# issue 29: the torch bridge and resume helpers
__all__ += ["TorchState", "TensorParallel", "mark_tensor_parallel", "save_state", "async_save_state", "load_state",
            "from_megatron", "RngNotRestoredWarning", "CheckpointManager", "list_iterations", "latest", "apply_retention"]
