"""ckpt: sharded, atomic, hash-checked checkpoints of PyTorch / numpy state.

    import ckpt
    sd = {"w": ckpt.ShardedTensor.from_rank_offsets("w", w, (0, tp_rank, tp_size))}
    ckpt.save(sd, root, iteration, comm=ckpt.TorchComm())
    ckpt.load(sd, root, comm=ckpt.TorchComm())     # in place, any TP/PP/DP layout

See README "Use it from PyTorch". The C++ library does the work (python/src);
tensors are read and written in place, never copied by the binding.
"""
import atexit as _atexit

from . import _ckpt
from ._api import AsyncSaveHandle, async_save, load, reserve_async_save, save, shutdown as _shutdown
from ._comm import MpiComm, TorchComm
from ._descriptors import ShardedObject, ShardedTensor
from ._errors import (AbortedError, AlreadyExistsError, CkptError, CkptIOError, CkptTimeoutError,
                      CorruptionError, FailedPreconditionError, InternalError, InvalidArgumentError,
                      NoSpaceError, NotFoundError, UnimplementedError)
from ._convert import convert
from ._read import Fingerprint, fingerprint, inspect, read_tensor, verify
from ._tensors import bf16_to_float32, float32_to_bf16

__all__ = ["ShardedTensor", "ShardedObject", "save", "load", "async_save", "reserve_async_save", "AsyncSaveHandle", "MpiComm",
           "TorchComm", "inspect", "verify", "fingerprint", "Fingerprint", "read_tensor", "bf16_to_float32", "float32_to_bf16",
           "CkptError", "CkptTimeoutError", "NotFoundError", "CorruptionError", "AbortedError",
           "InvalidArgumentError", "FailedPreconditionError", "AlreadyExistsError", "CkptIOError",
           "NoSpaceError", "UnimplementedError", "InternalError"]

_atexit.register(_shutdown)  # joins async saves, frees ckpt's MPI communicators; finalises MPI only if ckpt began it
