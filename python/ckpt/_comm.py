"""Control planes for multi-rank saves and loads.

comm=None        one process.
ckpt.MpiComm()   MPI (initialised by ckpt unless already, e.g. by mpi4py; ckpt
                 then never finalises it). The C++ MpiComm: point-to-point with
                 deadlines on a duplicate of MPI_COMM_WORLD.
ckpt.TorchComm() torch.distributed: the collectives run over the process
                 group's c10d store (TCPStore, FileStore, ...) with the Comm
                 contract of ckpt/base/comm.h: every call has a deadline, and a
                 rank that does not answer in time fails the call with a
                 CkptTimeoutError naming that rank and the phase. The store is
                 used rather than gloo collectives because a store key says
                 *which* rank is missing and is polled without blocking; gloo
                 collectives have one group-wide timeout and cannot name the
                 missing rank. Works with any backend (gloo, nccl).

Every rank must make the same sequence of ckpt calls on one comm. An async
save uses its own comm (a duplicate), so its background thread never shares
one with the caller.
"""
import time

from . import _ckpt
from ._errors import AbortedError, CkptTimeoutError


class MpiComm:
    """MPI_COMM_WORLD (duplicated). Collective to create, without a deadline."""

    def __init__(self):
        self._handle = _ckpt.mpi_comm()
        self._async = None

    @property
    def rank(self):
        return self._handle.rank

    @property
    def size(self):
        return self._handle.size

    def _async_handle(self):  # collective on first use
        if self._async is None:
            self._async = _ckpt.dup_mpi_comm(self._handle)
        return self._async


class _StoreComm:
    """Collectives over a c10d store (TorchComm's implementation, also its async
    duplicate). A message is a key; readiness is counted with store.add (which
    never blocks, unlike get/wait, and leaves the client connection clean when a
    deadline passes): the sender bumps a per-message flag and the receiver's
    counter; the receiver polls its counter and, at the deadline, the flags
    name the ranks whose messages are missing. The reader deletes what it read."""

    def __init__(self, rank, size, store, prefix):
        self.rank, self.size, self._store, self._prefix, self._seq = rank, size, store, prefix, 0

    def _next(self):
        self._seq += 1
        return f"{self._prefix}/{self._seq}"

    def _fail(self, phase, err):
        raise AbortedError(f"rank {self.rank}: control-plane store failed in phase '{phase}' "
                           f"(the rank hosting it, usually rank 0, may be dead): {err}") from None

    def _op(self, phase, fn, *args):
        try:
            return fn(*args)
        except RuntimeError as e:
            self._fail(phase, e)

    def _post(self, key, value, counter, phase):
        # One marker byte: torch's store mishandles empty values (a get of one
        # stalls ~0.6 s), and Barrier sends empty messages.
        self._op(phase, self._store.set, key, b"v" + bytes(value))
        self._op(phase, self._store.add, key + "/r", 1)
        self._op(phase, self._store.add, counter, 1)

    def _await(self, counter, want, senders, deadline, timeout, phase, what):
        """Polls `counter` until it reaches want; at the deadline raises naming
        the ranks of senders ({message key: rank}) whose message is missing."""
        pause = 5e-5
        while self._op(phase, self._store.add, counter, 0) < want:
            if time.monotonic() > deadline:
                missing = [r for k, r in senders.items() if self._op(phase, self._store.add, k + "/r", 0) == 0]
                ranks = ",".join(str(r) for r in sorted(missing)) or "?"
                raise CkptTimeoutError(f"rank {self.rank}: {what} rank(s) {ranks} within "
                                       f"{int(timeout * 1000)} ms in phase '{phase}'")
            time.sleep(pause)
            pause = min(pause * 2, 2e-3)

    def _read(self, key, phase):
        return self._op(phase, self._store.get, key)[1:]

    def _take(self, key, phase):
        value = self._read(key, phase)
        self._op(phase, self._store.delete_key, key)
        self._op(phase, self._store.delete_key, key + "/r")
        return value

    def gather(self, mine, root, timeout, phase):
        deadline = time.monotonic() + timeout
        base = self._next() + "/g"
        if self.rank != root:
            self._post(f"{base}/{self.rank}", mine, base + "/n", phase)
            return None
        senders = {f"{base}/{r}": r for r in range(self.size) if r != root}
        self._await(base + "/n", len(senders), senders, deadline, timeout, phase, "no answer from")
        out = [mine if r == root else self._take(f"{base}/{r}", phase) for r in range(self.size)]
        self._op(phase, self._store.delete_key, base + "/n")
        return out

    def broadcast(self, msg, root, timeout, phase):
        """Root returns once every rank has taken the message (as MpiComm's
        sends complete), so a root that exits next never strands a reader."""
        deadline = time.monotonic() + timeout
        base = self._next() + "/b"
        if self.rank == root:
            self._post(base + "/m", msg, base + "/n", phase)
            readers = {f"{base}/t{r}": r for r in range(self.size) if r != root}
            self._await(base + "/taken", len(readers), readers, deadline, timeout, phase, "message not taken by")
            for k in ["/m", "/m/r", "/n", "/taken"] + [f"/t{r}/r" for r in readers.values()]:
                self._op(phase, self._store.delete_key, base + k)
            return msg
        self._await(base + "/n", 1, {base + "/m": root}, deadline, timeout, phase, "no message from")
        got = self._read(base + "/m", phase)
        self._op(phase, self._store.add, f"{base}/t{self.rank}/r", 1)
        self._op(phase, self._store.add, base + "/taken", 1)
        return got

    def alltoall(self, out, timeout, phase):
        deadline = time.monotonic() + timeout
        base = self._next() + "/a"
        for d in range(self.size):
            if d != self.rank:
                self._post(f"{base}/{self.rank}>{d}", out[d], f"{base}/n{d}", phase)
        senders = {f"{base}/{s}>{self.rank}": s for s in range(self.size) if s != self.rank}
        self._await(f"{base}/n{self.rank}", len(senders), senders, deadline, timeout, phase, "no message from")
        got = [out[s] if s == self.rank else self._take(f"{base}/{s}>{self.rank}", phase) for s in range(self.size)]
        self._op(phase, self._store.delete_key, f"{base}/n{self.rank}")
        return got


class TorchComm(_StoreComm):
    """torch.distributed's process group (default: the world) as a ckpt control plane."""

    def __init__(self, process_group=None, store=None, prefix="ckpt"):
        import torch.distributed as dist
        if not dist.is_initialized():
            raise RuntimeError("ckpt.TorchComm: torch.distributed is not initialised (init_process_group)")
        if process_group is None or process_group is dist.group.WORLD:
            ranks = list(range(dist.get_world_size()))
        else:
            from torch.distributed import distributed_c10d as c10d
            ranks = sorted(c10d._pg_group_ranks[process_group].keys())
        store = store if store is not None else dist.distributed_c10d._get_default_store()
        name = "-".join(map(str, ranks)) if len(ranks) < 16 else f"{ranks[0]}x{len(ranks)}"
        super().__init__(dist.get_rank(process_group), dist.get_world_size(process_group), store,
                         f"{prefix}/{name}")
        self._handle = _ckpt.callback_comm(self)
        self._async = None

    def _async_handle(self):
        if self._async is None:
            self._async = _StoreComm(self.rank, self.size, self._store, self._prefix + "/async")
            self._async._handle = _ckpt.callback_comm(self._async)
        return self._async._handle


def handle_of(comm):
    """The extension's Comm handle for comm (None: one process)."""
    if comm is None:
        return None
    h = getattr(comm, "_handle", None)
    if h is None:
        raise TypeError(f"ckpt: comm must be None, ckpt.MpiComm() or ckpt.TorchComm(), got {type(comm).__name__}")
    return h


def async_handle_of(comm):
    """A comm dedicated to async saves (None: one process)."""
    return None if comm is None else comm._async_handle()
