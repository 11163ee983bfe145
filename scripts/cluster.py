#!/usr/bin/env python3
"""A test cluster of N "nodes" on this machine (issue 31): real processes, a real network stack.

Each node is a network namespace (its veth "eth0" on a private bridge, 10.231.0.<i>/24, no
default route: nothing is routed off the bridge) plus a holder process that owns the node's own
UTS (hostname n<i>), mount (a private tmpfs at /local) and pid namespaces (pids restart at 1, so
a restarted node reuses pids). Every node sees the host's other directories: a host directory is
the shared parallel filesystem. A launcher namespace "head" (10.231.0.254) runs mpirun, so that
killing a node never kills the launcher. Needs root (CI is root).

Usage (NAME: 1-6 of [a-z0-9], default "c"; state in /run/ckpt-cluster/NAME):
  cluster.py [--name NAME] up N [--owner PID]   # N nodes n1..nN (+ head); owner: see below
                                                # (NAME also from $CKPT_CLUSTER)
  cluster.py [--name NAME] exec NODE CMD...     # run CMD in NODE (n1.., or head), cwd kept
  cluster.py [--name NAME] kill NODE [--silent] # SIGKILL every process of NODE; --silent cuts
                                                # its link first (power loss: no FIN/RST seen)
  cluster.py [--name NAME] restart NODE         # a fresh node, same hostname/address, empty /local
  cluster.py [--name NAME] partition NODE       # NODE's link down (packets dropped silently)
  cluster.py [--name NAME] slow NODE [--delay-ms 100 --loss 1 --rate 8mbit]
                                                # netem when the kernel has it, else tbf rate limit
  cluster.py [--name NAME] heal [NODE]          # links up, shaping removed
  cluster.py [--name NAME] mpirun --host n1:2,n2:2 -- MPIRUN-ARGS...
                                                # mpirun on head, rsh agent/--mca set (mpirun_argv)
  cluster.py [--name NAME] torchrun --host n1:2,n2:2 [--port P] -- CMD...
                                                # one CMD per rank, torchrun's env (cluster_launch.py)
  cluster.py [--name NAME] status | down | gc   # gc: remove every cluster whose owner is dead
  cluster.py check                              # exit 0 if namespaces work here, else 77 + reason

Owner: `up --owner PID` records an owner process (a test script passes `--owner $$`; the
Python API below its own pid). Any later `up` or `gc` removes clusters whose owner is dead,
and `up NAME` always replaces a cluster of the same NAME, so a SIGKILLed test leaves nothing
behind for long. Without --owner a cluster stays until `down` or the next `up` of its NAME
(so one made by hand in one shell survives into the next).

Python: `from cluster import Cluster; c = Cluster.up(2, name="t1"); c.run("n1", ["hostname"]);
c.down()` (tests/cluster/ uses it; `with Cluster.up(...) as c:` downs it on exit).
"""
from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

STATE_ROOT = Path("/run/ckpt-cluster")
PREFIX = "ckc-"
SUBNET = "10.231.0"  # /24; each cluster has its own bridge, the nodes see no other network
HEAD_HOST = 254
LOCAL_MB = 256
SCRIPT = Path(__file__).resolve()


def _sh(*argv: str, check: bool = True, ns: str | None = None) -> subprocess.CompletedProcess:
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(argv)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip() or r.returncode}")
    return r


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks (field 22): a pid plus this names one process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] in ("Z", "X") else fields[19]  # a zombie is dead


def _alive(pid: int, start: str | None) -> bool:
    return pid > 0 and _start_time(pid) is not None and _start_time(pid) == start


def _ns_inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _pids_in_netns(inode: int) -> list[int]:
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit() and _ns_inode(f"/proc/{d}/ns/net") == inode:
            pids.append(int(d))
    return pids


def wait_for(pred, limit: float, poll: float = 0.05) -> bool:
    """pred() became true within `limit` seconds (checked every `poll`, and once more at the end)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(poll)
    return pred()


@contextlib.contextmanager
def _global_lock():
    STATE_ROOT.mkdir(parents=True, exist_ok=True)
    with open(STATE_ROOT / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def check() -> str | None:
    """None if this machine can run a cluster, else why not (tests then SKIP with it)."""
    if os.geteuid() != 0:
        return "not root: network/UTS/mount/pid namespaces need CAP_SYS_ADMIN and CAP_NET_ADMIN"
    for tool in ("ip", "tc", "unshare", "nsenter"):
        if not shutil.which(tool):
            return f"{tool} not found"
    with _global_lock():  # gc would take the probe for a leftover
        return _probe(f"{PREFIX}probe{os.getpid()}"[:15])


def _probe(probe: str) -> str | None:
    r = _sh("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"ip netns add failed: {r.stderr.strip()}"
    try:
        r = subprocess.run(["nsenter", f"--net=/run/netns/{probe}", "unshare", "--uts", "--mount",
                            "--pid", "--fork", "--mount-proc", "true"], capture_output=True, text=True)
        if r.returncode != 0:
            return f"unshare --uts --mount --pid failed: {r.stderr.strip()}"
        r = _sh("ip", "link", "add", probe, "type", "bridge", check=False)
        if r.returncode != 0:
            return f"cannot create a bridge: {r.stderr.strip()}"
        _sh("ip", "link", "del", probe, check=False)
    finally:
        _sh("ip", "netns", "del", probe, check=False)
    return None


class Cluster:
    """One cluster's names and state; methods are the CLI commands."""

    def __init__(self, name: str):
        if not re.fullmatch(r"[a-z0-9]{1,6}", name):
            raise ValueError(f"cluster name {name!r}: 1-6 characters [a-z0-9]")
        self.name = name
        self.dir = STATE_ROOT / name
        self.state: dict = {}
        try:  # written by rename: whole or absent; unreadable = a cluster to remove
            self.state = json.loads((self.dir / "state.json").read_text())
        except (OSError, ValueError):
            self.state = {}

    # ---- names ----
    def netns(self, node: str) -> str:
        return f"{PREFIX}{self.name}-{node}"

    def host_if(self, node: str) -> str:
        return f"{PREFIX}{self.name}-{node}"  # the host end of the node's veth (<= 15 chars)

    @property
    def bridge(self) -> str:
        return f"{PREFIX}{self.name}-br"

    @property
    def nodes(self) -> list[str]:
        return [f"n{i}" for i in range(1, self.state.get("n", 0) + 1)]

    def addr(self, node: str) -> str:
        return f"{SUBNET}.{HEAD_HOST if node == 'head' else int(node[1:])}"

    def processes(self, node: str, match) -> list[int]:
        """The pids of `node`'s processes (its network namespace) whose argv (a list of bytes)
        satisfies match(argv): e.g. the job's ranks, as mpirun's daemon there would signal them."""
        inode = _ns_inode(f"/run/netns/{self.netns(node)}")
        pids = []
        for pid in _pids_in_netns(inode) if inode else []:
            with contextlib.suppress(OSError):
                if match(open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")):
                    pids.append(pid)
        return pids

    def _node(self, node: str) -> dict:
        if node not in self.state.get("holders", {}):
            raise KeyError(f"cluster {self.name}: no node {node!r} (nodes: {self.nodes} and head)")
        return self.state["holders"][node]

    def _save(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.dir / "state.json.tmp"
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.dir / "state.json")

    # ---- up / down ----
    @classmethod
    def up(cls, n: int, name: str = "c", owner: int | None = None) -> "Cluster":
        if not 1 <= n <= 16:
            raise ValueError(f"up {n}: 1..16 nodes")
        owner = owner or 0
        with _global_lock():
            gc(keep=None)
            c = cls(name)
            c._remove()
            c.state = {"n": n, "owner": owner, "owner_start": _start_time(owner) if owner else None,
                       "holders": {}, "slow": {}}
            c._save()  # first: a half-made cluster is found (and removed) by its name
            try:
                c._make_net()
                for node in c.nodes + ["head"]:
                    c._start_node(node)
                c._save()
            except BaseException:
                c._remove()
                raise
        return c

    def _make_net(self) -> None:
        (self.dir / "hosts").write_text(
            "127.0.0.1 localhost\n" + "".join(f"{self.addr(x)} {x}\n" for x in self.nodes + ["head"]))
        _sh("ip", "link", "add", self.bridge, "type", "bridge")
        _no_ipv6(self.bridge)
        _sh("ip", "link", "set", self.bridge, "up")
        for node in self.nodes + ["head"]:
            ns, hif = self.netns(node), self.host_if(node)
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", hif, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _no_ipv6(hif)
            _sh("ip", "link", "set", hif, "master", self.bridge, "up")
            _sh("ip", "addr", "add", f"{self.addr(node)}/24", "dev", "eth0", ns=ns)
            _sh("ip", "link", "set", "eth0", "up", ns=ns)
            _sh("ip", "link", "set", "lo", "up", ns=ns)

    def _start_node(self, node: str) -> None:
        """A holder: hostname, /local tmpfs, /etc/hosts, then pid 1 of the node's pid namespace."""
        Path("/local").mkdir(exist_ok=True)  # an empty mount point on the host
        setup = (f"hostname {node} && mount -t tmpfs -o size={LOCAL_MB}m ckc-local /local && "
                 f"mount --bind {self.dir / 'hosts'} /etc/hosts && echo ready && exec sleep infinity >/dev/null")
        holder = subprocess.Popen(
            ["nsenter", f"--net=/run/netns/{self.netns(node)}", "unshare", "--uts", "--mount"]
            # head keeps the host's pids: its mpirun's rsh agent nsenters nodes by host pid
            + ([] if node == "head" else ["--pid", "--fork", "--mount-proc"])
            + ["--propagation", "private", "sh", "-c", setup],
            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, start_new_session=True, text=True)
        ready = holder.stdout.readline().strip()
        holder.stdout.close()
        if ready != "ready":
            holder.kill()
            raise RuntimeError(f"node {node}: holder did not start (exit {holder.wait()})")
        # a node's unshare forks pid 1 of its pid namespace: that child is the one to nsenter
        init = holder.pid if node == "head" else _child_of(holder.pid)
        self.state["holders"][node] = {"pid": holder.pid, "init": init, "init_start": _start_time(init)}

    def down(self) -> None:
        with _global_lock():
            self._remove()

    def _remove(self) -> None:
        for node in self.nodes + ["head"]:
            self._kill_procs(node)
        for node in self.nodes + ["head"]:
            _sh("ip", "netns", "del", self.netns(node), check=False)
        _remove_links(f"{PREFIX}{self.name}-")
        for ns in _list_netns():
            if ns.startswith(f"{PREFIX}{self.name}-"):
                _sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.state = {}

    def __enter__(self) -> "Cluster":
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    # ---- running things ----
    def nsenter(self, node: str, cwd: str | None = None) -> list[str]:
        h = self._node(node)
        if not _alive(h["init"], h["init_start"]):
            raise RuntimeError(f"cluster {self.name}: node {node} is down (killed); restart it")
        pid_ns = [] if node == "head" else ["-p"]
        return ["nsenter", "-t", str(h["init"])] + pid_ns + ["-u", "-m", "-n", f"-w{cwd or os.getcwd()}", "--"]

    def popen(self, node: str, argv: list[str], **kw) -> subprocess.Popen:
        return subprocess.Popen(self.nsenter(node, kw.pop("cwd", None)) + list(argv), **kw)

    def run(self, node: str, argv: list[str], **kw) -> subprocess.CompletedProcess:
        kw.setdefault("timeout", 300)
        return subprocess.run(self.nsenter(node, kw.pop("cwd", None)) + list(argv), **kw)

    def rsh_agent(self) -> str:
        """A script for mpirun's plm_rsh_agent: `agent HOST CMD...` runs CMD on node HOST."""
        path = self.dir / "rsh"
        path.write_text(f"#!/bin/sh\nexec {sys.executable} {SCRIPT} --name {self.name} rsh \"$@\"\n")
        path.chmod(0o755)
        return str(path)

    def mpirun_argv(self, hosts: dict[str, int]) -> list[str]:
        """mpirun (to run on head) over {node: slots}; btl/oob on the bridge subnet only."""
        return ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                "--host", ",".join(f"{n}:{k}" for n, k in hosts.items()),
                "--mca", "plm_rsh_agent", self.rsh_agent(),
                "--mca", "oob_tcp_if_include", f"{SUBNET}.0/24",
                "--mca", "btl_tcp_if_include", f"{SUBNET}.0/24", "--mca", "btl", "tcp,self",
                # a node lost: mpirun SIGTERMs the survivors, which then still need up to 2 x
                # their deadline + 1 s to name it (ckpt/mpi/launcher_term.h); SIGKILL only after
                "--mca", "odls_base_sigkill_timeout", "30",
                # a rank whose TCP peer died reports it through OpenMPI's show_help, which waits
                # (in the MPI call) for the local daemon's answer - never given while mpirun
                # aborts the job: the GPT job's rank 0 hung in its save's wait until SIGKILL
                # (tests/cluster/test_gpt_sigterm.py, 2 of 2 runs). Quiet: no such wait.
                "--mca", "orte_execute_quiet", "1"]

    # ---- faults ----
    def _kill_procs(self, node: str) -> None:
        h = self.state.get("holders", {}).get(node)
        inode = _ns_inode(f"/run/netns/{self.netns(node)}")
        victims = _pids_in_netns(inode) if inode else []
        if h and _alive(h["init"], h["init_start"]):
            victims.append(h["init"])  # the kernel then kills all of the node's pid namespace
        victims = [(pid, _start_time(pid)) for pid in victims]
        for pid, _ in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5  # SIGKILL is asynchronous: return once all are gone
        while any(_alive(pid, start) for pid, start in victims) and time.monotonic() < deadline:
            time.sleep(0.02)

    def kill(self, node: str, silent: bool = False) -> None:
        self._node(node)
        if silent:
            self.partition(node)
        self._kill_procs(node)

    def restart(self, node: str) -> None:
        with _global_lock():
            self._kill_procs(node)
            self._start_node(node)
            self._save()
        self.heal(node)

    def partition(self, node: str) -> None:
        self._node(node)
        _sh("ip", "link", "set", self.host_if(node), "down")

    def slow(self, node: str, delay_ms: int = 100, loss_pct: float = 1.0, rate: str = "8mbit") -> str:
        """Shapes both directions of NODE's link; returns what was applied (netem or tbf)."""
        self._node(node)
        ends = [(self.host_if(node), None), ("eth0", self.netns(node))]
        how = f"netem delay {delay_ms}ms loss {loss_pct}%"
        for dev, ns in ends:
            _sh("tc", "qdisc", "del", "dev", dev, "root", ns=ns, check=False)
            r = _sh("tc", "qdisc", "add", "dev", dev, "root", "netem", "delay", f"{delay_ms}ms",
                    "loss", f"{loss_pct}%", ns=ns, check=False)
            if r.returncode != 0:  # no sch_netem in this kernel: a rate limit with a latency cap
                how = (f"tbf rate {rate} latency {delay_ms}ms (netem unavailable: "
                       f"{r.stderr.strip().splitlines()[0] if r.stderr.strip() else r.returncode})")
                _sh("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", "16kb",
                    "latency", f"{delay_ms}ms", ns=ns)
        self.state["slow"][node] = how
        self._save()
        return how

    def heal(self, node: str | None = None) -> None:
        for x in [node] if node else self.nodes:
            _sh("ip", "link", "set", self.host_if(x), "up")
            for dev, ns in ((self.host_if(x), None), ("eth0", self.netns(x))):
                _sh("tc", "qdisc", "del", "dev", dev, "root", ns=ns, check=False)
            self.state.get("slow", {}).pop(x, None)
        self._save()

    def status(self) -> dict:
        out = {"name": self.name, "owner": self.state.get("owner"), "nodes": {}}
        for node in self.nodes + ["head"]:
            h = self.state["holders"].get(node, {})
            link = _sh("ip", "-o", "link", "show", self.host_if(node), check=False).stdout
            out["nodes"][node] = {"addr": self.addr(node), "up": _alive(h.get("init", 0), h.get("init_start")),
                                  "link": "down" if "state DOWN" in link or ",UP" not in link else "up",
                                  "slow": self.state.get("slow", {}).get(node)}
        return out


def _child_of(pid: int) -> int:
    for _ in range(200):
        kids = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        if kids:
            return int(kids[0])
        time.sleep(0.01)
    raise RuntimeError(f"holder {pid} has no child")


def _no_ipv6(dev: str) -> None:
    p = Path(f"/proc/sys/net/ipv6/conf/{dev}/disable_ipv6")
    if p.exists():
        p.write_text("1")


def _list_netns() -> list[str]:
    return [line.split()[0] for line in _sh("ip", "netns", "list", check=False).stdout.splitlines() if line]


def _remove_links(prefix: str) -> None:
    for line in _sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(prefix):
            _sh("ip", "link", "del", name, check=False)


def gc(keep: str | None = None) -> list[str]:
    """Removes clusters whose owner is dead and ckc- leftovers that have no state (caller holds
    the lock). A cluster with no owner (--owner 0) stays until `down` or an `up` of its name."""
    removed = []
    names = {p.name for p in STATE_ROOT.iterdir() if p.is_dir()} if STATE_ROOT.exists() else set()
    for name in sorted(names - {keep}):
        c = Cluster(name)
        owner = c.state.get("owner", 0)
        if not c.state or (owner and not _alive(owner, c.state.get("owner_start"))):
            c._remove()
            removed.append(name)
    for ns in _list_netns():  # leftovers of a state dir removed by hand
        if ns.startswith(PREFIX) and ns[len(PREFIX):].split("-")[0] not in names:
            _sh("ip", "netns", "del", ns, check=False)
    live = tuple(f"{PREFIX}{n}-" for n in names - set(removed))
    for line in _sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0]
        if name.startswith(PREFIX) and not name.startswith(live):
            _sh("ip", "link", "del", name, check=False)
    return removed


def _rsh(c: Cluster, args: list[str]) -> int:
    """mpirun's remote shell: [ssh-like options] HOST CMD... -> CMD via sh -c on node HOST."""
    while args and args[0].startswith("-"):
        args = args[1:]
    host, cmd = args[0], " ".join(args[1:])
    return subprocess.call(c.nsenter(host, "/") + ["/bin/sh", "-c", f"cd {shlex.quote(os.getcwd())} 2>/dev/null; {cmd}"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cluster.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--name", default=os.environ.get("CKPT_CLUSTER", "c"))
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("up"); p.add_argument("n", type=int); p.add_argument("--owner", type=int, default=0)
    p = sub.add_parser("exec"); p.add_argument("node"); p.add_argument("argv", nargs=argparse.REMAINDER)
    p = sub.add_parser("rsh"); p.add_argument("argv", nargs=argparse.REMAINDER)
    p = sub.add_parser("mpirun"); p.add_argument("--host", required=True, help="n1:2,n2:2")
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p = sub.add_parser("torchrun"); p.add_argument("--host", required=True, help="n1:2,n2:2")
    p.add_argument("--port", type=int, default=29650); p.add_argument("--timeout", type=float, default=600)
    p.add_argument("argv", nargs=argparse.REMAINDER)
    p = sub.add_parser("kill"); p.add_argument("node"); p.add_argument("--silent", action="store_true")
    for cmd in ("restart", "partition"):
        sub.add_parser(cmd).add_argument("node")
    p = sub.add_parser("slow"); p.add_argument("node"); p.add_argument("--delay-ms", type=int, default=100)
    p.add_argument("--loss", type=float, default=1.0); p.add_argument("--rate", default="8mbit")
    sub.add_parser("heal").add_argument("node", nargs="?")
    for cmd in ("status", "down", "gc", "check"):
        sub.add_parser(cmd)
    a = ap.parse_args(argv)
    if a.cmd == "check":
        why = check()
        print(why or "ok")
        return 77 if why else 0
    if a.cmd == "gc":
        with _global_lock():
            print(" ".join(gc()) or "nothing to remove")
        return 0
    if a.cmd == "up":
        c = Cluster.up(a.n, a.name, a.owner)
        print(json.dumps(c.status()))
        return 0
    c = Cluster(a.name)
    if not c.state:
        print(f"cluster.py: no cluster {a.name!r} (run `cluster.py --name {a.name} up N`)", file=sys.stderr)
        return 2
    argv_rest = getattr(a, "argv", [])
    argv_rest = argv_rest[1:] if argv_rest[:1] == ["--"] else argv_rest
    if a.cmd == "exec":
        return subprocess.call(c.nsenter(a.node) + argv_rest)
    if a.cmd == "rsh":
        return _rsh(c, a.argv)
    if a.cmd in ("mpirun", "torchrun"):
        hosts = dict((h.split(":")[0], int(h.split(":")[1]) if ":" in h else 1) for h in a.host.split(","))
        if a.cmd == "mpirun":
            return subprocess.call(c.nsenter("head") + c.mpirun_argv(hosts) + argv_rest)
        from cluster_launch import TorchJob  # noqa: PLC0415
        codes = TorchJob(c, hosts, argv_rest, port=a.port, log=sys.stdout).wait(a.timeout)
        return next((x for x in codes if x != 0), 0) & 0xFF
    if a.cmd == "slow":
        print(f"slow {a.node}: {c.slow(a.node, a.delay_ms, a.loss, a.rate)}")
    elif a.cmd in ("kill", "restart", "partition", "heal"):
        getattr(c, a.cmd)(a.node, a.silent) if a.cmd == "kill" else getattr(c, a.cmd)(a.node)
    elif a.cmd == "status":
        print(json.dumps(c.status(), indent=1))
    elif a.cmd == "down":
        c.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
