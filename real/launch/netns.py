"""An emulated cluster on this machine: one network namespace per host, a switch namespace with a bridge, a veth
link from every host to the switch, and a rate limit on both directions of every link.

Topology (H hosts, names carry ``sarlab``, the launcher's pid and a per-process sequence number)::

    sarlab-PID-SEQ-h0 [eth0 10.213.0.1/24] ==veth== [h0] sarlab-PID-SEQ-sw (bridge br0)
    sarlab-PID-SEQ-h1 [eth0 10.213.0.2/24] ==veth== [h1]        ...

Every host namespace gets an ``/etc/hosts`` naming the hosts (``/etc/netns/NS/hosts``, which ``ip netns exec``
shows there), so reverse look-ups of peers (c10d does them) answer at once instead of failing on an unreachable DNS
(``/etc/netns`` itself is removed again when the run created it).
Both ends of every veth are created directly inside their namespaces, so nothing appears in the root namespace's
``ip link`` and nothing can route out: the only addresses are the hosts' own, no default route, no NAT. Deleting
the namespaces removes everything.

Shaping (each link end's egress: the host's ``eth0`` is its upload, the switch port its download): an HTB root of
``rate``, a priority class for pure TCP acknowledgements (so a host that is uploading does not delay the ACKs of
what it is downloading) and a bulk class with a byte FIFO holding ``QUEUE_S`` of traffic at the link rate.
Measured with ``sarlab netbench`` at 50 mbit .. 1 gbit: 95-96 % of the rate as payload one way, both ways at once and
around a ring of 3 hosts (the rest is Ethernet/IP/TCP headers).
"""
from __future__ import annotations

import contextlib
import glob
import itertools
import logging
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable

from sarlab.data.staging import pid_alive
from sarlab.real.launch.netspec import NetSpec

_log = logging.getLogger(__name__)

PREFIX = "sarlab"
SUBNET = "10.213.0"  # host h is SUBNET.(h+1)/24; exists only inside the run's namespaces
IFNAME = "eth0"
# The variables naming the interface a backend binds to, each set to IFNAME on emulated hosts.
IFACE_ENV = {"GLOO_SOCKET_IFNAME": IFNAME, "CCL_KVS_IFACE": IFNAME, "FI_TCP_IFACE": IFNAME}
MASTER_PORT = 29500  # every host namespace is fresh: the port is free
QUEUE_S = 0.02  # bulk queue: 20 ms at the link rate
MIN_QUEUE_BYTES = 128 * 1024
ETC_NETNS = "/etc/netns"  # `ip netns exec NS` shows ETC_NETNS/NS/hosts as /etc/hosts
_NAME = re.compile(rf"^{PREFIX}-(\d+)-")
_sequence = itertools.count()


class NetworkError(RuntimeError):
    """The emulated network cannot be built here (not root, a tool or kernel feature missing) or broke."""


def _run(cmd: list[str], check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if check and res.returncode != 0:
        raise NetworkError(f"`{' '.join(cmd)}` failed: {res.stderr.strip() or res.stdout.strip()}")
    return res


def namespaces() -> list[str]:
    """Names of all network namespaces (``ip netns list``; none where ``ip`` is missing)."""
    if shutil.which("ip") is None:
        return []
    res = _run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in res.stdout.splitlines() if line.strip()]


def ours(names: list[str] | None = None) -> list[str]:
    """The namespaces sarlab created (any launcher)."""
    return [n for n in (namespaces() if names is None else names) if _NAME.match(n)]


def check_host() -> None:
    """Raise :class:`NetworkError` unless this process can build the network: root, ``ip``, ``tc``, and (probed in a
    throw-away namespace that vanishes with its process) veth, bridge, HTB, bfifo and the u32 classifier."""
    if os.geteuid() != 0:
        raise NetworkError("--net veth needs root (network namespaces, veth links and qdiscs are privileged): run "
                           "as root, or use --net loopback")
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise NetworkError(f"--net veth needs {' and '.join(missing)} (package iproute2); not found on PATH")
    if shutil.which("unshare") is None:
        return  # no way to probe without creating names; a missing feature fails at creation, then torn down
    probe = " && ".join([
        "ip link add probe0 type veth peer name probe1", "ip link add probebr type bridge",
        *_shape_commands("", "probe0", 10**6), "ip link set probe0 up"])
    res = subprocess.run(["unshare", "--net", "sh", "-c", probe], capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise NetworkError("the kernel lacks a feature the emulated network needs (veth, bridge, the htb/bfifo "
                           f"qdiscs or the u32 classifier): {res.stderr.strip()}")


def _shape_commands(ns: str, dev: str, rate_bps: int) -> list[str]:
    """``tc`` commands that limit ``dev``'s egress to ``rate_bps``; pure ACKs (IPv4 TCP, 20-byte IP header, total
    length < 64, flags exactly ACK) go first."""
    tc = f"tc -n {ns}" if ns else "tc"
    rate_bytes = rate_bps // 8
    burst = max(64 * 1024 + 1514, rate_bytes // 500)  # >= one GSO packet, >= 2 ms at the rate
    queue = max(MIN_QUEUE_BYTES, int(rate_bytes * QUEUE_S))
    ack_rate = max(rate_bps // 20, 8000)
    cls = f"{tc} class add dev {dev} parent"
    return [
        f"{tc} qdisc add dev {dev} root handle 1: htb default 20",
        f"{cls} 1: classid 1:1 htb rate {rate_bps}bit ceil {rate_bps}bit burst {burst}b cburst {burst}b quantum 60000",
        f"{cls} 1:1 classid 1:10 htb rate {ack_rate}bit ceil {rate_bps}bit burst {burst}b cburst {burst}b "
        "prio 0 quantum 60000",
        f"{cls} 1:1 classid 1:20 htb rate {rate_bps - ack_rate}bit ceil {rate_bps}bit burst {burst}b "
        f"cburst {burst}b prio 1 quantum 60000",
        f"{tc} qdisc add dev {dev} parent 1:10 handle 10: pfifo limit 1000",
        f"{tc} qdisc add dev {dev} parent 1:20 handle 20: bfifo limit {queue}",
        f"{tc} filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip protocol 6 0xff "
        "match u8 0x05 0x0f at 0 match u16 0x0000 0xffc0 at 2 match u8 0x10 0xff at 33 flowid 1:10",
    ]


def remove_leftovers(log: Callable[[str], None] = _log.info) -> list[str]:
    """Delete the namespaces (and run directories) of sarlab launchers that are no longer alive; says what it removed.

    Returns the removed namespace names.
    """
    def dead(name: str) -> bool:
        m = _NAME.match(name)
        return bool(m) and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1)))

    stale: dict[int, list[str]] = {}
    for name in filter(dead, ours()):
        stale.setdefault(int(_NAME.match(name).group(1)), []).append(name)
    removed = []
    for pid, names in sorted(stale.items()):
        _delete(names)
        removed += names
        log(f"removed leftovers of a dead launcher (pid {pid}): namespaces {', '.join(sorted(names))}")
    if os.path.isdir(ETC_NETNS):
        for name in filter(dead, os.listdir(ETC_NETNS)):
            shutil.rmtree(os.path.join(ETC_NETNS, name), ignore_errors=True)
    remove_stale_rundirs(log)
    return removed


def remove_stale_rundirs(log: Callable[[str], None] = _log.info) -> list[str]:
    """Delete the run directories and temporary partitions (``$TMPDIR/sarlab-run-PID-*``,
    ``$TMPDIR/sarlab-parts-PID-*``) of launchers that are no longer alive."""
    removed = []
    for path in glob.glob(os.path.join(tempfile.gettempdir(), f"{PREFIX}-*-*-*")):
        m = re.match(rf"{PREFIX}-(?:run|parts)-(\d+)-", os.path.basename(path))
        if m and int(m.group(1)) != os.getpid() and not pid_alive(int(m.group(1))):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            log(f"removed leftovers of a dead launcher (pid {m.group(1)}): {path}")
    return removed


def _delete(names: list[str], wait_s: float = 10.0) -> None:
    """Delete namespaces (hosts before the switch) with their /etc/netns files, and wait until ``ip netns list``
    no longer shows them."""
    for name in sorted(names, key=lambda n: n.endswith("-sw")):
        _run(["ip", "netns", "delete", name], check=False)
        shutil.rmtree(os.path.join(ETC_NETNS, name), ignore_errors=True)
    deadline = time.monotonic() + wait_s
    while True:
        left = set(names) & set(namespaces())
        if not left:
            return
        if time.monotonic() > deadline:
            raise NetworkError(f"could not delete network namespace(s) {', '.join(sorted(left))}; remove them with "
                               "`ip netns delete NAME`")
        for name in left:
            _run(["ip", "netns", "delete", name], check=False)
        time.sleep(0.1)


class EmulatedNetwork:
    """The hosts, switch and shaped links of one run; a context manager that builds them and always removes them.

    Rank r lives on host ``r // (workers / hosts)``, as torchrun numbers ranks across nodes.

    Args:
        spec: a ``veth`` network spec.
        workers: number of ranks (the spec's ``hosts`` must divide it).
    """

    def __init__(self, spec: NetSpec, workers: int):
        if not spec.emulated:
            raise ValueError(f"{spec} is not an emulated network")
        self.spec, self.workers = spec, workers
        self.hosts = spec.hosts_for(workers)
        self.per_host = workers // self.hosts
        self.tag = f"{PREFIX}-{os.getpid()}-{next(_sequence)}"
        self.switch = f"{self.tag}-sw"
        self.created: list[str] = []
        self.made_etc_netns = False

    def namespace(self, host: int) -> str:
        return f"{self.tag}-h{host}"

    def address(self, host: int) -> str:
        return f"{SUBNET}.{host + 1}"

    def host_of(self, rank: int) -> int:
        return rank // self.per_host

    def create(self) -> EmulatedNetwork:
        """Build everything; on any failure remove what was built and raise :class:`NetworkError`."""
        try:
            self._add_namespace(self.switch)
            _run(["ip", "-n", self.switch, "link", "add", "br0", "type", "bridge"])
            _run(["ip", "-n", self.switch, "link", "set", "br0", "addrgenmode", "none"])
            _run(["ip", "-n", self.switch, "link", "set", "br0", "up"])
            for h in range(self.hosts):
                ns, port = self.namespace(h), f"h{h}"
                self._add_namespace(ns)
                _run(["ip", "link", "add", IFNAME, "netns", ns, "type", "veth", "peer", "name", port, "netns",
                      self.switch])
                _run(["ip", "-n", self.switch, "link", "set", port, "master", "br0"])
                _run(["ip", "-n", ns, "addr", "add", f"{self.address(h)}/24", "dev", IFNAME])
                self._write_hosts(ns)
                for cmd in _shape_commands(ns, IFNAME, self.spec.rate_bps) + _shape_commands(
                        self.switch, port, self.spec.rate_bps):
                    _run(cmd.split())
                _run(["ip", "-n", self.switch, "link", "set", port, "addrgenmode", "none", "up"])
                _run(["ip", "-n", ns, "link", "set", IFNAME, "addrgenmode", "none", "up"])  # IPv4 only
        except BaseException:
            self.destroy()
            raise
        return self

    def _add_namespace(self, name: str) -> None:
        _run(["ip", "netns", "add", name])
        self.created.append(name)
        _run(["ip", "-n", name, "link", "set", "lo", "up"])

    def _write_hosts(self, ns: str) -> None:
        lines = ["127.0.0.1 localhost", "::1 localhost"]
        for h in range(self.hosts):  # c10d looks peers up by their IPv4-mapped IPv6 address
            lines += [f"{self.address(h)} {self.tag}-h{h} h{h}", f"::ffff:{self.address(h)} {self.tag}-h{h} h{h}"]
        try:
            if not os.path.isdir(ETC_NETNS):
                self.made_etc_netns = True  # removed again by destroy() when it is empty
            os.makedirs(os.path.join(ETC_NETNS, ns), exist_ok=True)
            with open(os.path.join(ETC_NETNS, ns, "hosts"), "w") as f:
                f.write("\n".join(lines) + "\n")
        except OSError:
            pass  # a read-only /etc: c10d then warns that it cannot name its peers, nothing worse

    def destroy(self) -> None:
        """Remove every namespace this network created (and with them their links and qdiscs)."""
        if self.created:
            _delete(list(self.created))
        self.created = []
        if self.made_etc_netns:
            with contextlib.suppress(OSError):  # not empty: another run's files are in it
                os.rmdir(ETC_NETNS)
            self.made_etc_netns = False

    def __enter__(self) -> EmulatedNetwork:
        return self.create()

    def __exit__(self, *exc) -> None:
        self.destroy()

    def command(self, rank: int) -> list[str]:
        """The prefix that runs a command inside ``rank``'s host."""
        return ["ip", "netns", "exec", self.namespace(self.host_of(rank))]

    def env(self, rank: int) -> dict[str, str]:
        """env:// variables for ``rank``, as torchrun would set them across hosts (rendezvous at host 0), and the
        host's interface for every backend: gloo (``GLOO_SOCKET_IFNAME``), oneCCL's key-value store
        (``CCL_KVS_IFACE``) and libfabric's tcp provider (``FI_TCP_IFACE``), so no backend picks loopback."""
        return {"MASTER_ADDR": self.address(0), "MASTER_PORT": str(MASTER_PORT), **IFACE_ENV,
                "LOCAL_RANK": str(rank % self.per_host), "GROUP_RANK": str(self.host_of(rank))}

    def hosts_down(self) -> list[int]:
        """Hosts whose link is down (their ``eth0`` or their switch port not up)."""
        down = []
        for h in range(self.hosts):
            for ns, dev in ((self.namespace(h), IFNAME), (self.switch, f"h{h}")):
                res = _run(["ip", "-n", ns, "-o", "link", "show", "dev", dev], check=False)
                flags = re.search(r"<([^>]*)>", res.stdout)
                if res.returncode != 0 or not flags or "UP" not in flags.group(1).split(","):
                    down.append(h)
                    break
        return down

    def ranks_on(self, host: int) -> list[int]:
        return list(range(host * self.per_host, (host + 1) * self.per_host))

    def describe(self) -> str:
        return (f"{self.hosts} emulated host(s) x {self.per_host} worker(s), links of {self.spec.rate_bps / 1e6:g} "
                f"Mbit/s each way, rendezvous at {self.address(0)}:{MASTER_PORT} ({self.tag}-*)")
