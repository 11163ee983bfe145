"""ckpt's exceptions: CkptError and one subclass per ckpt status code.

Every failure of the C++ library reaches Python as a CkptError with
  .code    the ckpt code name ("Timeout", "NotFound", "Corruption", ...) of the
           cause: a rank that aborts because another rank failed raises the
           class of that rank's failure (the library's typed Status::cause(),
           never parsed from the message); .status_code is the code of the
           status as returned ("Aborted" for such a relay)
  .rank    the rank that hit the failure first where the library records it
           (origin rank), else the rank that reports it
  .phase   the protocol phase where recorded ("plan", "vote", "load", ...),
           else the API call ("save", "load", "async_save", ...)
  .message the library's message (names file, tensor, rank and phase)
  .reporting_rank / .op  the process that raised it and its API call.
  .missing_ranks / .missing_hosts / .missing_phase  for a deadline failure
           (Timeout, or its relay): the ranks not heard from, the host each
           ran on ("" where unknown) and the phase (Status::missing(), typed;
           empty lists otherwise).
"""

class CkptError(RuntimeError):
    code = "Internal"

    def __init__(self, message, code=None, rank=-1, phase="", reporting_rank=-1, op="", status_code=None,
                 missing_ranks=(), missing_hosts=(), missing_phase=""):
        super().__init__(message)
        self.missing_ranks, self.missing_hosts = list(missing_ranks), list(missing_hosts)
        self.missing_phase = missing_phase
        if code is not None:
            self.code = code
        self.status_code = status_code or self.code
        self.message = message
        self.rank = rank
        self.phase = phase
        self.reporting_rank = reporting_rank
        self.op = op

    def __str__(self):  # a rank only where one is known (never "rank -1")
        where = ", ".join(([f"rank {self.rank}"] if self.rank >= 0 else []) + ([f"phase {self.phase}"] if self.phase else []))
        return f"{self.code}: {self.message}" + (f" ({where})" if where else "")

    def __reduce__(self):  # picklable (torch.multiprocessing, mpi4py)
        return (_rebuild, (self.status_code, self.message, self.rank, self.phase, self.reporting_rank, self.op,
                           self.code, (self.missing_ranks, self.missing_hosts, self.missing_phase)))


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


class OutcomeUnknownError(CkptError):
    """A save whose outcome this rank cannot know: the iteration may be committed
    (visible, its durability unconfirmed). Check it (ckpt.verify / load) before
    relying on it or saving that iteration again."""
    code = "OutcomeUnknown"


_BY_CODE = {c.code: c for c in (InvalidArgumentError, NotFoundError, AlreadyExistsError, CorruptionError,
                                CkptIOError, NoSpaceError, CkptTimeoutError, AbortedError,
                                FailedPreconditionError, UnimplementedError, InternalError,
                                OutcomeUnknownError)}


def _rebuild(code, message, rank, phase, reporting_rank, op, cause=None, missing=None):
    return make_error(code, message, reporting_rank, op, rank, phase, cause, missing)


# The library names its options the CLI's way and the C++ way; a Python
# caller reads them as the keyword it passes.
_PY_TERMS = (("--allow-older / SaveOptions::allow_older", "allow_older=True"),
             ("train --resume, load of the latest", "ckpt.load with iteration=None"))


def make_error(code, message, reporting_rank, op, origin_rank=-1, phase="", cause=None, missing=None):
    """The exception for a failed ckpt Status (called by the extension): the
    class of its cause's code (Status::cause(): the failure an Aborted status
    relays, else `code` itself), the message in Python's terms; `missing`:
    (ranks, hosts, phase) of Status::missing()."""
    for cli, py in _PY_TERMS:
        message = message.replace(cli, py)
    cause = cause or code
    cls = _BY_CODE.get(cause, CkptError)
    ranks, hosts, missing_phase = missing or ((), (), "")
    return cls(message, code=cause, rank=origin_rank if origin_rank >= 0 else reporting_rank,
               phase=phase or op, reporting_rank=reporting_rank, op=op, status_code=code,
               missing_ranks=ranks, missing_hosts=hosts, missing_phase=missing_phase)
