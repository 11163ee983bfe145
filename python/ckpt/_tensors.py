"""Host buffers of torch tensors and numpy arrays for the C++ library.

A contiguous CPU tensor / C-contiguous numpy array is handed over by address
(zero copy): save reads it, load writes into it in place. Anything else is
staged through a contiguous host copy: a CUDA tensor (copied to host for a
save; loaded into host memory and copied back for a load) and a non-contiguous
view (same, on the CPU). bf16 numpy data is held as uint16 bit patterns with
dtype="bf16" given explicitly (numpy has no bfloat16).
"""
import numpy as np

try:
    import torch
except ImportError:  # numpy-only use
    torch = None

_NUMPY = {np.dtype(np.float32): "fp32", np.dtype(np.float64): "fp64", np.dtype(np.float16): "fp16",
          np.dtype(np.int64): "int64", np.dtype(np.int32): "int32", np.dtype(np.int16): "int16",
          np.dtype(np.int8): "int8", np.dtype(np.uint8): "uint8", np.dtype(np.bool_): "bool"}
_SIZE = {"fp32": 4, "fp64": 8, "bf16": 2, "fp16": 2, "int64": 8, "int32": 4, "int16": 2, "int8": 1,
         "uint8": 1, "bool": 1}
_NUMPY_OF = {v: k for k, v in _NUMPY.items()}
_NUMPY_OF["bf16"] = np.dtype(np.uint16)

if torch is not None:
    _TORCH = {torch.float32: "fp32", torch.float64: "fp64", torch.bfloat16: "bf16", torch.float16: "fp16",
              torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
              torch.uint8: "uint8", torch.bool: "bool"}
    _TORCH_OF = {v: k for k, v in _TORCH.items()}
else:
    _TORCH, _TORCH_OF = {}, {}


def is_torch(x):
    return torch is not None and isinstance(x, torch.Tensor)


def shape_of(x):
    return tuple(int(d) for d in x.shape)


def dtype_name(x, override=None):
    """ckpt's dtype name of a tensor/array (override: e.g. "bf16" for uint16 numpy bits)."""
    if is_torch(x):
        name = _TORCH.get(x.dtype)
        size = x.element_size()
    elif isinstance(x, np.ndarray):
        name = _NUMPY.get(x.dtype)
        size = x.dtype.itemsize
    else:
        raise TypeError(f"ckpt: expected a torch.Tensor or numpy.ndarray, got {type(x).__name__}")
    if override is not None:
        if _SIZE.get(override) != size:
            raise ValueError(f"ckpt: dtype '{override}' does not fit elements of {size} bytes ({x.dtype})")
        return override
    if name is None:
        raise TypeError(f"ckpt: unsupported dtype {x.dtype} (use one of {sorted(_SIZE)})")
    return name


class HostBuffer:
    """The host bytes the library reads (save) or writes (load) for one tensor."""

    def __init__(self, x, for_load):
        self.source = x
        self.staged = None
        if is_torch(x):
            if x.device.type == "cpu" and x.is_contiguous():
                host = x.detach()
            else:  # CUDA or a strided view: a contiguous host copy
                host = torch.empty(x.shape, dtype=x.dtype) if for_load else x.detach().to("cpu").contiguous()
                self.staged = host
            self.address, self.nbytes = host.data_ptr(), host.numel() * host.element_size()
            self._keep = host
        else:
            if x.flags.c_contiguous and (x.flags.writeable or not for_load):
                host = x
            else:
                if for_load and not x.flags.writeable:
                    raise ValueError("ckpt: cannot load into a read-only numpy array")
                host = np.ascontiguousarray(x)
                self.staged = host
            self.address, self.nbytes = host.ctypes.data, host.nbytes
            self._keep = host

    def finish_load(self):
        """Copies a staged load back into the caller's tensor/array."""
        if self.staged is None:
            return
        if is_torch(self.source):
            with torch.no_grad():
                self.source.copy_(self.staged)
        else:
            self.source[...] = self.staged


def empty(shape, dtype, as_numpy):
    """A new zeroed host tensor/array of ckpt dtype `dtype` (bf16: torch.bfloat16 / numpy uint16 bits)."""
    if as_numpy or torch is None:
        return np.zeros(shape, dtype=_NUMPY_OF[dtype])
    return torch.zeros(shape, dtype=_TORCH_OF[dtype])


def bf16_to_float32(bits):
    """numpy uint16 bf16 bit patterns -> float32 values (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values):
    """float32 -> bf16 bit patterns (uint16), round to nearest even; NaN stays NaN."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7F800000) == 0x7F800000
    nan &= (u & 0x007FFFFF) != 0
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)
