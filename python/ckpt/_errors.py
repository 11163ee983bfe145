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
import re


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


class OutcomeUnknownError(CkptError):
    """A save whose outcome this rank cannot know: the iteration may be committed
    (visible, its durability unconfirmed). Check it (ckpt.verify / load) before
    relying on it or saving that iteration again."""
    code = "OutcomeUnknown"


_BY_CODE = {c.code: c for c in (InvalidArgumentError, NotFoundError, AlreadyExistsError, CorruptionError,
                                CkptIOError, NoSpaceError, CkptTimeoutError, AbortedError,
                                FailedPreconditionError, UnimplementedError, InternalError,
                                OutcomeUnknownError)}


def _rebuild(code, message, rank, phase, reporting_rank, op):
    return make_error(code, message, reporting_rank, op, rank, phase)


_RANK_FAILED = re.compile(r"(rank \d+ failed: )+")


def _root_cause(code, message):
    """(code, message) of the root cause of an Aborted status: a rank that
    aborts because another failed (or because rank 0's decision failed) gets
    Aborted with the text "[rank <r> failed: ]<CodeName>: <message>"
    (RemoteFailure / RankFailed in save.cc). The caller acts on the cause (a
    used root, an existing iteration, a bad descriptor), so the cause's class
    is raised; messages without such a prefix stay Aborted."""
    while code == "Aborted":
        m = _RANK_FAILED.match(message)
        rest = message[m.end():] if m else message
        name, sep, tail = rest.partition(": ")
        if not sep or name not in _BY_CODE or name == "Aborted" and not m:
            break
        code, message = name, (message[:m.end()] if m else "") + tail
    return code, message


# The library names its options the CLI's way and the C++ way; a Python
# caller reads them as the keyword it passes.
_PY_TERMS = (("--allow-older / SaveOptions::allow_older", "allow_older=True"),
             ("train --resume, load of the latest", "ckpt.load with iteration=None"))


def make_error(code, message, reporting_rank, op, origin_rank=-1, phase=""):
    """The exception for a failed ckpt Status (called by the extension): the
    class of the root cause's code (_root_cause), the message in Python's terms."""
    code, message = _root_cause(code, message)
    for cli, py in _PY_TERMS:
        message = message.replace(cli, py)
    cls = _BY_CODE.get(code, CkptError)
    return cls(message, code=code, rank=origin_rank if origin_rank >= 0 else reporting_rank,
               phase=phase or op, reporting_rank=reporting_rank, op=op)
