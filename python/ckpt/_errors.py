"""ckpt's exceptions: CkptError and one subclass per ckpt status code.

Every failure of the C++ library reaches Python as a CkptError with
  .code    the ckpt code name ("Timeout", "NotFound", "Corruption", ...)
  .rank    the rank that hit the failure first where the library records it
           (origin rank), else the rank that reports it
  .phase   the protocol phase where recorded ("plan", "vote", "load", ...),
           else the API call ("save", "load", "async_save", ...)
  .message the library's message (names file, tensor, rank and phase)
  .reporting_rank / .op  the process that raised it and its API call.
"""


class CkptError(RuntimeError):
    code = "Internal"

    def __init__(self, message, code=None, rank=-1, phase="", reporting_rank=-1, op=""):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.rank = rank
        self.phase = phase
        self.reporting_rank = reporting_rank
        self.op = op

    def __str__(self):  # a rank only where one is known (never "rank -1")
        where = ", ".join(([f"rank {self.rank}"] if self.rank >= 0 else []) + ([f"phase {self.phase}"] if self.phase else []))
        return f"{self.code}: {self.message}" + (f" ({where})" if where else "")

    def __reduce__(self):  # picklable (torch.multiprocessing, mpi4py)
        return (_rebuild, (self.code, self.message, self.rank, self.phase, self.reporting_rank, self.op))


class InvalidArgumentError(CkptError, ValueError):
    code = "InvalidArgument"


class NotFoundError(CkptError, LookupError):
    code = "NotFound"


class AlreadyExistsError(CkptError):
    code = "AlreadyExists"


class CorruptionError(CkptError):
    code = "Corruption"


class CkptIOError(CkptError, OSError):
    code = "IOError"


class NoSpaceError(CkptIOError):
    code = "NoSpace"


class CkptTimeoutError(CkptError, TimeoutError):
    code = "Timeout"


class AbortedError(CkptError):
    code = "Aborted"


class FailedPreconditionError(CkptError):
    code = "FailedPrecondition"


class UnimplementedError(CkptError, NotImplementedError):
    code = "Unimplemented"


class InternalError(CkptError):
    code = "Internal"


_BY_CODE = {c.code: c for c in (InvalidArgumentError, NotFoundError, AlreadyExistsError, CorruptionError,
                                CkptIOError, NoSpaceError, CkptTimeoutError, AbortedError,
                                FailedPreconditionError, UnimplementedError, InternalError)}


def _rebuild(code, message, rank, phase, reporting_rank, op):
    return make_error(code, message, reporting_rank, op, rank, phase)


def make_error(code, message, reporting_rank, op, origin_rank=-1, phase=""):
    """The exception for a failed ckpt Status (called by the extension)."""
    cls = _BY_CODE.get(code, CkptError)
    return cls(message, code=code, rank=origin_rank if origin_rank >= 0 else reporting_rank,
               phase=phase or op, reporting_rank=reporting_rank, op=op)
