"""Control planes for multi-rank saves and loads.

comm=None        one process.
ckpt.MpiComm()   MPI (initialised by ckpt unless already, e.g. by mpi4py; ckpt
                 then never finalises it). The C++ MpiComm: point-to-point with
                 deadlines on a duplicate of MPI_COMM_WORLD.
ckpt.TorchComm() torch.distributed: the collectives run over the process
                 group's c10d store (TCPStore, FileStore, ...) with the Comm
                 contract of ckpt/base/comm.h: every call has a deadline, and a
                 rank that does not answer in time fails the call with a
                 CkptTimeoutError naming that rank, its host and the phase
                 (as fields too: missing_ranks, missing_hosts, missing_phase;
                 each rank registers its hostname in the store when the
                 TorchComm is made). The store is
                 used rather than gloo collectives because a store key says
                 *which* rank is missing and is polled without blocking; gloo
                 collectives have one group-wide timeout and cannot name the
                 missing rank. Works with any backend (gloo, nccl).

Every rank must make the same sequence of ckpt calls on one comm. An async
save uses its own comm (a duplicate), so its background thread never shares
one with the caller.

SIGTERM (mpirun's, after it lost a node): with a ckpt.MpiComm, a SIGTERM that
comes while a save/load wait is in flight, and whose action is the default,
is deferred until that wait ends by its deadline; the save/load then raises as
usual (CkptTimeoutError naming missing_ranks / missing_hosts), ckpt prints
that error and the process takes SIGTERM's default action (exit status 143).
Outside a wait, or with a Python handler installed (signal.signal), SIGTERM
behaves as without ckpt (ckpt/mpi/launcher_term.h).
"""
import atexit
import contextlib
import socket
import threading
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


# Root's broadcasts whose readers may not all have read yet (_Posted). Root
# returns from a broadcast at once; it deletes the last key (the readers'
# counter) when it finds the count complete at its next broadcast, or every key
# once the readers' deadline is long past (a dead reader), and at interpreter
# exit (atexit) it waits, bounded, for them: a root hosting the store (rank 0
# of torch's TCPStore) must not take it down under a reader.
_EXIT_WAIT_MAX_S = 10.0
_PENDING = []
_PENDING_LOCK = threading.Lock()


class _Posted:
    def __init__(self, comm, base, readers, timeout):
        now = time.monotonic()
        self.comm, self.base, self.readers = comm, base, readers
        self.wait_until = now + min(timeout, _EXIT_WAIT_MAX_S) + 1.0
        self.expire_at = now + 2 * timeout + 1.0  # past every reader's deadline

    def taken(self):
        return self.comm._store.add(self.base + "/taken", 0) >= self.readers

    def forget(self, every_key):
        for k in ("/m", "/m/r", "/n", "/taken") if every_key else ("/taken",):
            self.comm._store.delete_key(self.base + k)


def _tidy_broadcasts(comm):
    """Root, before a new broadcast: drops its earlier broadcasts' leftovers."""
    now = time.monotonic()
    with _PENDING_LOCK:
        mine = [p for p in _PENDING if p.comm is comm]
        _PENDING[:] = [p for p in _PENDING if p.comm is not comm]
    keep = []
    for p in mine:
        if p.taken():
            p.forget(False)
        elif now > p.expire_at:
            p.forget(True)
        else:
            keep.append(p)
    with _PENDING_LOCK:
        _PENDING.extend(keep)


@atexit.register
def _drain_broadcasts():
    with _PENDING_LOCK:
        pending, _PENDING[:] = list(_PENDING), []
    for p in pending:
        try:
            while time.monotonic() < p.wait_until and not p.taken():
                time.sleep(0.005)
        except Exception:  # noqa: BLE001 - the store is gone already: nothing to wait for
            pass


class _StoreComm:
    """Collectives over a c10d store (TorchComm's implementation, also its async
    duplicate). A message is a key; readiness is counted with store.add (which
    never blocks, unlike get/wait, and leaves the client connection clean when a
    deadline passes): the sender bumps a per-message flag and the receiver's
    counter; the receiver polls its counter and, at the deadline, the flags
    name the ranks whose messages are missing. The reader deletes what it read."""

    def __init__(self, rank, size, store, prefix, hosts_prefix=None):
        self.rank, self.size, self._store, self._prefix, self._seq = rank, size, store, prefix, 0
        self._hosts_prefix, self._hosts = hosts_prefix or prefix, {}

    def register_host(self):
        """Publishes this rank's hostname (host(rank) on every other rank)."""
        self._hosts[self.rank] = socket.gethostname()
        key = f"{self._hosts_prefix}/host/{self.rank}"
        self._op("init", self._store.set, key, self._hosts[self.rank])
        self._op("init", self._store.add, key + "/r", 1)  # readable without waiting (host())

    def host(self, rank):
        """The host `rank` registered ("" where unknown); never waits: a key not
        there yet (or a store gone) reads as unknown."""
        if rank not in self._hosts:
            key = f"{self._hosts_prefix}/host/{rank}"
            try:
                if self._store.add(key + "/r", 0) == 0:  # add never blocks; get would
                    return ""
                self._hosts[rank] = self._store.get(key).decode(errors="replace")
            except RuntimeError:
                return ""
        return self._hosts[rank]

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
                missing = sorted(r for k, r in senders.items() if self._op(phase, self._store.add, k + "/r", 0) == 0)
                hosts = [self.host(r) for r in missing]
                where = ", ".join(f"rank {r} on host '{h or '?'}'" for r, h in zip(missing, hosts))
                ranks = ", ".join(str(r) for r in missing) or "?"
                raise CkptTimeoutError(f"rank {self.rank}: {what} rank(s) {ranks} within "
                                       f"{int(timeout * 1000)} ms in phase '{phase}' ({where})",
                                       rank=self.rank, phase=phase, missing_ranks=missing, missing_hosts=hosts,
                                       missing_phase=phase)
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
        """Root posts the message and returns at once, as MpiComm's eager sends
        do: it never waits for (or fails on) a reader, so a rank that died after
        the preceding gather cannot make root's outcome differ from the ranks
        that took the message, and root reaches its next collective with the
        others (a late root would be blamed for the rank it waited on). The last
        reader deletes the message; at exit root waits, bounded, for the readers
        of its recent broadcasts, so the store it may host outlives their reads
        (_Posted)."""
        deadline = time.monotonic() + timeout
        base = self._next() + "/b"
        if self.rank == root:
            if self.size == 1:
                return msg
            self._op(phase, _tidy_broadcasts, self)
            self._post(base + "/m", msg, base + "/n", phase)
            with _PENDING_LOCK:
                _PENDING.append(_Posted(self, base, self.size - 1, timeout))
            return msg
        self._await(base + "/n", 1, {base + "/m": root}, deadline, timeout, phase, "no message from")
        got = self._read(base + "/m", phase)
        if self._op(phase, self._store.add, base + "/taken", 1) == self.size - 1:
            for k in ("/m", "/m/r", "/n"):  # root deletes "/taken" once it saw it complete
                self._op(phase, self._store.delete_key, base + k)
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
        self.register_host()
        self._handle = _ckpt.callback_comm(self)
        self._async = None

    def _async_handle(self):
        if self._async is None:
            self._async = _StoreComm(self.rank, self.size, self._store, self._prefix + "/async", self._prefix)
            self._async._hosts = self._hosts  # one registry: the hosts of this group
            self._async._handle = _ckpt.callback_comm(self._async)
        return self._async._handle


def _outcome(op, e):
    text = f"{op}: {type(e).__name__}: {e}"
    if getattr(e, "missing_ranks", None):
        text += f" (missing_ranks={e.missing_ranks}, missing_hosts={e.missing_hosts})"
    return text


@contextlib.contextmanager
def ends_after_launcher_term(op):
    """Around a save/load: after a SIGTERM deferred during it (module docstring),
    prints how it ended - its error with the missing ranks and hosts - and ends
    the process by SIGTERM's default action. Otherwise nothing."""
    try:
        yield
    except BaseException as e:
        if _ckpt.launcher_terminating():
            _ckpt.end_after_launcher_term(_outcome(op, e))
        raise
    if _ckpt.launcher_terminating():
        _ckpt.end_after_launcher_term(f"{op}: ended")


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
