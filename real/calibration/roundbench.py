"""Ring rounds and all-to-alls (gloo or ccl, `--backend`) on an emulated network, timed per round (``python -m
sarlab.real.calibration.roundbench``).

A probe of the network side of an epoch with no model in it: ``N`` ranks, one per emulated host
(:mod:`sarlab.real.launch.netns`, ``veth:rate=R``) or all on loopback, run the engine's exchange patterns with fixed
message sizes and no tensor work, optionally with a fixed amount of CPU work per round (``--spin-ms``: thread CPU time,
as an aggregation's compute would take on the shared cores):

* ``ring:D``: the ``sar`` forward's rounds (:mod:`sarlab.core.aggregate`'s ``RingFetch``): rounds ``1..D+1`` posted
  (receive first, then send, as :class:`sarlab.core.comm.Comm` posts them), then per round: wait for both messages,
  spin, post the next unposted round; ``N - 1`` rounds (``--rounds K``: ``K``, the peers at distance
  ``1 + k mod (N - 1)`` in round ``k``), ``D + 1`` of them in flight;
* ``oneshot``: all ``N - 1`` exchanges posted at once, then all waited for;
* ``global``: the SAR library's rounds (IntelLabs SAR runs every ring round as one ``dist.all_to_all`` over all
  ``N`` ranks): per round one batch with every peer, the round's message to ``p + r`` and from ``p - r`` and a
  1-element (4-byte) tensor to and from each of the ``N - 2`` others, posted as isend/irecv (receives first) in
  one ``batch_isend_irecv`` and all waited before the next round: gloo's ``dist.all_to_all`` (torch 2.13) refuses
  parts of unequal sizes ("invalid tensor size"), so it cannot run this round;
* ``global-a2a``: the same round as one ``dist.all_to_all_single`` with split sizes (gloo's alltoallv), a
  collective, waited before the next round.

Every received buffer is checked after the pass (outside its timing) to hold its sender's rank.

Every pass is timed from a barrier to the last rank's end of the pattern; each rank also records its per-round
waits and the TCP counters of its own namespace (``/proc/net/snmp`` and ``/proc/net/netstat`` are per network
namespace) over the pass: segments retransmitted, retransmission timeouts, tail-loss probes. The parent reads the
qdiscs' drop counters of every link end (host uploads, switch ports = downloads) at the end.

The result (JSON, ``--out``) has per pattern the median pass time over repeats, that per round (``round_s``;
``oneshot``: per ``N - 1``), the bytes a rank handed to its sends per pass, and ``ideal_s``: the pattern's bytes
at the link's payload bandwidth (``--bandwidth-Bps``, else the ``--link-in`` profile's ``bandwidth_bidir_Bps``, else
``0.95 R / 8``) with every link busy all the time, ``rounds x bytes / B``
(:func:`sarlab.simulator.system.roundmodel.pass_bytes`); next to it the simulator's prediction of the same passes
(``model``, :func:`sarlab.simulator.system.roundmodel.model_pass`, with ``--profile``'s message software; ``--predict``
prints only that, without ranks or root); and ``shared_efficiency`` (:func:`fit_shared_efficiency`,
:mod:`sarlab.simulator.network.sharing`). With ``--link-in A.json --out B.json`` it writes the link profile ``A`` with
``shared_efficiency`` and the probe (``sharing``) added; the simulator reads the field from that file itself
(:func:`sarlab.simulator.network.linkprofile.read_link_profile` makes the link a
:class:`sarlab.simulator.network.sharing.SharedLink`). A calibration of the link, not of any engine run; it needs root
and a quiet machine (the 2026-11-24 numbers were taken under a 1-min load of 5-16 from other work).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from sarlab.common.paths import package_parent
from sarlab.real.calibration.ranks import run_ranks
from sarlab.simulator.hardware.provenance import resolve_profile
from sarlab.simulator.system.roundmodel import PATTERN, concurrent, model_link, model_table, pass_bytes, round_count

ROOT = package_parent()  # the directory holding the sarlab package
#: TCP counters read per pass: (file, section, field)
COUNTERS = (("snmp", "Tcp", "RetransSegs"), ("netstat", "TcpExt", "TCPTimeouts"),
            ("netstat", "TcpExt", "TCPLossProbes"), ("netstat", "TcpExt", "TCPSpuriousRTOs"))


def tcp_counters() -> dict[str, int]:
    """This network namespace's TCP counters of :data:`COUNTERS` (``/proc/net/snmp``, ``/proc/net/netstat``)."""
    found: dict[str, int] = {}
    for name in ("snmp", "netstat"):
        lines = Path(f"/proc/net/{name}").read_text().splitlines()
        for head, values in zip(lines[::2], lines[1::2]):
            section, keys = head.split(":", 1)
            vals = dict(zip(keys.split(), values.split(":", 1)[1].split()))
            for file, sec, field in COUNTERS:
                if file == name and sec == section and field in vals:
                    found[field] = int(vals[field])
    return found


def spin(seconds: float) -> None:
    """Burn ``seconds`` of this thread's CPU time."""
    if seconds <= 0:
        return
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for _ in range(1000):
            x += 1


class _RankPasses:
    """One rank's side of the probe (module docstring): its send and receive buffers, the patterns as posts and
    waits, and the check of what a pass received. A pass has ``K`` rounds (``rounds``, 0: ``N - 1``); round ``k``
    exchanges with the peers at distance ``1 + k mod (N - 1)``."""

    def __init__(self, torch, dist, rank: int, N: int, nbytes: int, rounds: int, spin_s: float, a2a: bool) -> None:
        self.dist, self.rank, self.N, self.spin_s = dist, rank, N, spin_s
        n, K = max(1, nbytes // 4), rounds or N - 1
        self.n, self.K = n, K
        M = max(K, N - 1)
        self.sends = [torch.full((n,), float(rank)) for _ in range(M)]
        self.recvs = [torch.empty(n) for _ in range(M)]
        self.mine = torch.full((1,), float(rank))  # what a global round sends the peers it has nothing for
        self.dummies = [torch.empty(1) for _ in range(N)]  # what it receives from them (one per peer)
        # global-a2a's buffers (the round's message and the 1-element parts) only where it runs: 8 ranks' add up
        self.flat = torch.full((n + N - 2,) if a2a else (0,), float(rank))
        self.flat_out = [torch.empty(n + N - 2) for _ in range(K if a2a else 0)]
        self.sent = 0  # bytes handed to the sends of this pass

    def reset(self) -> None:
        """Before a pass: every receive buffer NaN, no bytes sent."""
        for buf in (*self.recvs, *self.dummies, *self.flat_out):
            buf.fill_(float("nan"))
        self.sent = 0

    def peers(self, k: int) -> tuple[int, int]:
        r = 1 + k % (self.N - 1)
        return (self.rank + r) % self.N, (self.rank - r) % self.N

    def post(self, k: int) -> list:
        dist = self.dist
        dst, src = self.peers(k)
        self.sent += self.sends[k].nbytes
        ops = [dist.P2POp(dist.irecv, self.recvs[k], src, tag=k), dist.P2POp(dist.isend, self.sends[k], dst, tag=k)]
        return dist.batch_isend_irecv(ops)

    def post_global(self, k: int) -> list:
        """Round ``k`` as one exchange with every peer: receives first, then sends (one batch)."""
        dist = self.dist
        dst, src = self.peers(k)
        others = [q for q in range(self.N) if q != self.rank]
        ops = [dist.P2POp(dist.irecv, self.recvs[k] if q == src else self.dummies[q], q, tag=k) for q in others]
        outgoing = [self.sends[k] if q == dst else self.mine for q in others]
        self.sent += sum(t.nbytes for t in outgoing)
        ops += [dist.P2POp(dist.isend, t, q, tag=k) for q, t in zip(others, outgoing)]
        return dist.batch_isend_irecv(ops)

    def splits(self, k: int) -> tuple[list[int], list[int]]:
        dst, src = self.peers(k)
        size = [0 if q == self.rank else 1 for q in range(self.N)]
        return ([self.n if q == src else s for q, s in enumerate(size)],
                [self.n if q == dst else s for q, s in enumerate(size)])

    def post_a2a(self, k: int) -> list:
        """Round ``k`` as one ``all_to_all_single`` of all ranks (gloo's alltoallv, unequal parts)."""
        into, outof = self.splits(k)
        self.sent += 4 * sum(outof)
        return [self.dist.all_to_all_single(self.flat_out[k], self.flat, into, outof, async_op=True)]

    def ring(self, depth: int, poster) -> list[float]:
        waits, posted, nxt = [], deque(), 0
        while nxt < self.K and len(posted) <= depth:
            posted.append(poster(nxt))
            nxt += 1
        while posted:
            works = posted.popleft()
            t = time.perf_counter()
            for work in works:
                work.wait()
            waits.append(time.perf_counter() - t)
            spin(self.spin_s)
            if nxt < self.K:
                posted.append(poster(nxt))
                nxt += 1
        return waits

    def oneshot(self) -> list[float]:
        works = [w for k in range(self.N - 1) for w in self.post(k)]
        t = time.perf_counter()
        for work in works:
            work.wait()
        spin(self.spin_s * (self.N - 1))
        return [time.perf_counter() - t]

    def run(self, pattern: str) -> list[float]:
        """One pass of ``pattern``; returns the waits of its rounds (``oneshot``: one)."""
        if pattern == "oneshot":
            return self.oneshot()
        if pattern == "global":
            return self.ring(0, self.post_global)
        if pattern == "global-a2a":
            return self.ring(0, self.post_a2a)
        return self.ring(int(pattern.split(":")[1]), self.post)

    def check(self, pattern: str) -> None:
        """Every buffer the pass received holds its sender's rank (NaN-filled before the pass)."""
        N, K, rank = self.N, self.K, self.rank
        got = []
        count = N - 1 if pattern == "oneshot" else K
        for k in range(count):
            src = self.peers(k)[1]
            if pattern == "global-a2a":
                parts = self.flat_out[k].split(self.splits(k)[0])
                got += [(q, part) for q, part in enumerate(parts) if part.numel()]
            else:
                got.append((src, self.recvs[k]))
        if pattern == "global":  # the peers that were not a round's source sent a 4-byte tensor
            got += [(q, self.dummies[q]) for q in range(N)
                    if q != rank and any(self.peers(k)[1] != q for k in range(K))]
        for q, buf in got:
            if not bool((buf == q).all()):
                raise RuntimeError(f"rank {rank} {pattern}: a buffer from rank {q} holds {buf[:4].tolist()}")


def _child(patterns: list[str], nbytes: int, repeats: int, spin_s: float, rounds: int, out: str,
           backend: str = "gloo") -> None:
    """One rank: every pattern ``repeats + 1`` times (the first warms the connections and is not kept); a pass
    has ``rounds`` rounds (0: ``N - 1``), round ``k`` with the peers at distance ``1 + k mod (N - 1)``. After every
    pass (outside its timing) each received buffer is checked to hold its sender's rank."""
    import torch
    import torch.distributed as dist

    from sarlab.core.comm import prepare_backend

    torch.set_num_threads(1)
    prepare_backend(backend)
    dist.init_process_group(backend, init_method="env://", timeout=datetime.timedelta(seconds=300))
    rank, N = dist.get_rank(), dist.get_world_size()
    passes = _RankPasses(torch, dist, rank, N, nbytes, rounds, spin_s, "global-a2a" in patterns)
    samples = []
    for pattern in patterns:
        for i in range(repeats + 1):
            passes.reset()
            c0 = tcp_counters()
            dist.barrier()
            t0 = time.perf_counter()
            waits = passes.run(pattern)
            local = time.perf_counter() - t0
            dist.barrier()
            c1 = tcp_counters()
            passes.check(pattern)
            if i:
                samples.append({"pattern": pattern, "repeat": i, "rank": rank, "local_s": local, "waits_s": waits,
                                "bytes_sent": passes.sent, "tcp": {k: c1[k] - c0.get(k, 0) for k in c1}})
    everyone: list = [None] * N
    dist.all_gather_object(everyone, samples)
    dist.destroy_process_group()
    if rank == 0:
        Path(out).write_text(json.dumps([s for part in everyone for s in part]))


def qdisc_drops(network) -> dict[str, int]:
    """Packets the bulk queues dropped so far: host uploads (``eth0``) and switch ports (downloads), summed."""
    totals = {"upload": 0, "download": 0}
    for h in range(network.hosts):
        for where, ns, dev in (("upload", network.namespace(h), "eth0"), ("download", network.switch, f"h{h}")):
            res = subprocess.run(["tc", "-n", ns, "-s", "qdisc", "show", "dev", dev], capture_output=True,
                                 text=True, timeout=30)
            totals[where] += sum(int(m) for m in re.findall(r"dropped (\d+)", res.stdout))
    return totals


@contextlib.contextmanager
def rank_hosts(net: str, world: int) -> Iterator[tuple[Callable[[int], dict[str, str]], Callable[[int], list[str]],
                                                       Any]]:
    """Where ``world`` ranks run on ``net``: all on 127.0.0.1 (``loopback``) or one emulated host each
    (``veth:rate=R``; the hosts are created here and removed on exit). Yields ``(env, prefix, network)``: the
    environment of rank ``r`` (env:// variables and the host's interface variables), the command prefix that runs it
    on its host, and the :class:`~sarlab.real.launch.netns.EmulatedNetwork` (None on loopback)."""
    from sarlab.real.launch import netns
    from sarlab.real.launch.launcher import worker_env
    from sarlab.real.launch.netspec import NetSpec

    spec = NetSpec.parse(net)
    network = None
    if spec.emulated:
        netns.check_host()
        network = netns.EmulatedNetwork(NetSpec(spec.kind, spec.rate_bps, world), world)
    host = network.address(0) if network is not None else "127.0.0.1"
    port = netns.MASTER_PORT if network is not None else 29000 + os.getpid() % 1000

    def env(rank: int) -> dict[str, str]:
        return {**worker_env(rank, world, host, port), **(network.env(rank) if network is not None else {})}

    def prefix(rank: int) -> list[str]:
        return network.command(rank) if network is not None else []

    try:
        if network is not None:
            network.create()
        yield env, prefix, network
    finally:
        if network is not None:
            network.destroy()


def measure(net: str, world: int, patterns: list[str], nbytes: int, repeats: int, spin_s: float, rounds: int = 0,
            timeout_s: float = 300.0, backend: str = "gloo") -> dict:
    """Start ``world`` ranks on ``net`` (``loopback`` or ``veth:rate=R``, one host per rank), run the patterns,
    return the samples and the qdiscs' drops."""
    out = tempfile.mktemp(prefix="roundbench-", suffix=".json")

    def command(prefix: list[str]) -> list[str]:
        return [*prefix, sys.executable, "-m", "sarlab.real.calibration.roundbench", "--child", "--patterns",
                ",".join(patterns),
                "--bytes", str(nbytes), "--repeats", str(repeats), "--spin-ms", str(spin_s * 1e3),
                "--rounds", str(rounds), "--samples", out, "--backend", backend]

    try:
        with rank_hosts(net, world) as (env, prefix, network):
            run_ranks(world, lambda rank: command(prefix(rank)), env, "roundbench", timeout_s)
            drops = qdisc_drops(network) if network is not None else {}
        return {"samples": json.loads(Path(out).read_text()), "qdisc_drops": drops}
    finally:
        if os.path.exists(out):
            os.remove(out)


def summarize(samples: list[dict], world: int, nbytes: int, bandwidth_Bps: float, rounds: int = 0) -> dict[str, dict]:
    """Per pattern: the median over repeats of the slowest rank's pass, that per round (``oneshot``: per ``N - 1``),
    the ideal (module docstring: every link busy with the pass's bytes, :func:`pass_bytes`), their ratio, the
    median per-round wait, the bytes a rank handed to its sends per pass, and the TCP counters summed over ranks
    and repeats."""
    table: dict[str, dict] = {}
    for pattern in dict.fromkeys(s["pattern"] for s in samples):
        mine = [s for s in samples if s["pattern"] == pattern]
        passes = [max(s["local_s"] for s in mine if s["repeat"] == i) for i in sorted({s["repeat"] for s in mine})]
        count = round_count(pattern, world, rounds)
        ideal = pass_bytes(pattern, world, nbytes, rounds) / bandwidth_Bps if bandwidth_Bps else 0.0
        tcp: dict[str, int] = {}
        for s in mine:
            for k, v in s["tcp"].items():
                tcp[k] = tcp.get(k, 0) + v
        waits = [w for s in mine for w in s["waits_s"]]
        median = statistics.median(passes)
        table[pattern] = {"pass_s": median, "passes_s": passes, "round_s": median / count, "ideal_s": ideal,
                          "over_ideal": median / ideal if ideal else None,
                          "median_wait_s": statistics.median(waits), "max_wait_s": max(waits),
                          "bytes_sent_per_rank": max(s.get("bytes_sent", 0) for s in mine),
                          "tcp_per_pass": {k: v / len(passes) for k, v in tcp.items()}}
    return table


def fit_shared_efficiency(table: dict[str, dict], world: int, nbytes: int, bandwidth_Bps: float,
                          rounds: int = 0) -> float:
    r"""``eta_shared`` (:mod:`sarlab.simulator.network.sharing`) of the patterns with concurrent flows: the median over
    ``ring:D`` (``D >= 1``) and ``oneshot`` of the efficiency that makes the model's pass time equal the measured one.

    In the model every message of such a pass but a channel's first finds its channel busy (the prefetched round,
    or the all-to-all's other messages), so with ``K`` messages per channel of ``T = bytes / B`` seconds each a pass
    takes :math:`T (1 + (K - 1) / \eta)`, hence :math:`\eta = (K - 1) T / (t - T)`, at most 1 (latency and gaps,
    well under 1 ms, left out). ``ring:0`` and the global rounds (one bulk flow per link end) are not used. NaN
    without such a pattern.
    """
    T = nbytes / bandwidth_Bps
    etas = []
    for pattern, row in table.items():
        if not concurrent(pattern):
            continue
        K = round_count(pattern, world, rounds)
        if K > 1:
            t = row["pass_s"]
            etas.append(1.0 if t <= K * T else (K - 1) * T / (t - T))
    return statistics.median(etas) if etas else float("nan")


def table_lines(model: dict[str, dict], measured: dict[str, dict] | None = None) -> list[str]:
    """The measurement (where given) and the model, one row per pattern, times in ms."""
    head = f"{'pattern':10} {'model pass':>11} {'model round':>11}"
    if measured:
        head += f" {'pass':>9} {'round':>9} {'pass/model':>10} {'ideal':>9} {'round wait median':>17}"
    lines = [head + "  (ms)"]
    for pattern, m in model.items():
        line = f"{pattern:10} {m['pass_s'] * 1e3:11.2f} {m['round_s'] * 1e3:11.3f}"
        if measured and pattern in measured:
            row = measured[pattern]
            line += (f" {row['pass_s'] * 1e3:9.2f} {row['round_s'] * 1e3:9.3f} {row['pass_s'] / m['pass_s']:10.2f}"
                     f" {row['ideal_s'] * 1e3:9.2f} {row['median_wait_s'] * 1e3:17.3f}")
        lines.append(line)
    return lines


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--net", default="veth:rate=150mbit", help="loopback or veth:rate=R (one host per rank)")
    parser.add_argument("--world", type=int, default=8, help="ranks (default 8)")
    parser.add_argument("--patterns", default="ring:0,ring:1,oneshot",
                        help="comma list of ring:D (prefetch D), oneshot, global, global-a2a")
    parser.add_argument("--bytes", type=int, default=2_000_000, help="bytes of every message (default 2 MB)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per pattern (default 3)")
    parser.add_argument("--rounds", type=int, default=0, help="ring rounds per pass (default N - 1)")
    parser.add_argument("--spin-ms", type=float, default=0.0, help="CPU milliseconds each rank burns per round")
    parser.add_argument("--bandwidth-Bps", type=float, default=0.0, help="payload B/s of the ideal (default 0.95 R/8)")
    parser.add_argument("--link-in", help="a link profile (sarlab netbench) of this rate: its bidirectional bandwidth "
                        "is the ideal's, and --out writes it with shared_efficiency added")
    parser.add_argument("--link", help="a link profile the model's link (and the ideal's bandwidth) come from, as "
                        "--link-in's, without changing what --out writes")
    parser.add_argument("--profile", help="the simulator profile whose message software the model uses (a preset, "
                        "a shipped profile's name or a JSON path; default: sarlab simulate's)")
    parser.add_argument("--predict", action="store_true", help="print the model's table only (no ranks, no root)")
    parser.add_argument("--out", help="write the result (or, with --link-in, the link profile with it) as JSON here")
    parser.add_argument("--backend", default="gloo", choices=["gloo", "ccl"],
                        help="torch.distributed backend of the ranks (default gloo)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--samples", help=argparse.SUPPRESS)
    return parser


def _measured(args: argparse.Namespace, patterns: list[str], bandwidth: float, model: dict[str, dict], title: str,
              source: str, link: dict) -> tuple[list[str], dict]:
    """The measuring run of :func:`main`: the ranks' passes and the fitted ``shared_efficiency``. Returns the lines
    :func:`main` prints (per pattern, the drops and the load, the table beside the model, the fit) and what ``--out``
    writes (with ``--link-in``: the link profile with the fit and the probe added)."""
    from sarlab.core.comm import check_backend

    check_backend(args.backend)  # ccl: built here once, not in every rank
    load = os.getloadavg()[0]
    raw = measure(args.net, args.world, patterns, args.bytes, args.repeats, args.spin_ms / 1e3, args.rounds,
                  backend=args.backend)
    table = summarize(raw["samples"], args.world, args.bytes, bandwidth, args.rounds)
    lines = []
    for pattern, row in table.items():
        ratio = f"{row['over_ideal']:.2f}x ideal {row['ideal_s']:.3f} s" if row["over_ideal"] else ""
        tcp = ", ".join(f"{k} {v:g}" for k, v in row["tcp_per_pass"].items())
        lines.append(f"{args.backend} {args.net} N={args.world} {args.bytes / 1e6:g} MB spin {args.spin_ms:g} ms "
                     f"{pattern:10}: pass "
                     f"{row['pass_s']:.3f} s {ratio}; round wait median {row['median_wait_s'] * 1e3:.1f} ms, max "
                     f"{row['max_wait_s'] * 1e3:.1f} ms; per pass: {tcp}")
    lines.append(f"qdisc drops (all patterns): {raw['qdisc_drops']}; 1-min load before {load:.2f}, after "
                 f"{os.getloadavg()[0]:.2f}")
    lines += [title, *table_lines(model, table)]
    eta = fit_shared_efficiency(table, args.world, args.bytes, bandwidth, args.rounds) if bandwidth else float("nan")
    lines.append(f"shared_efficiency {eta:.3f} (the share of the bandwidth a message sharing a busy link end gets)")
    result = {"net": args.net, "backend": args.backend, "world": args.world,
              "bytes": args.bytes, "rounds": args.rounds, "spin_ms": args.spin_ms,
              "bandwidth_Bps": bandwidth, "load": load, "shared_efficiency": eta, "summary": table,
              "model": model, "profile": source, **raw}
    if args.link_in and eta != eta:
        lines.append("no pattern with concurrent flows (ring:D with D >= 1, oneshot, more than one round) to fit "
                     "shared_efficiency: --out gets the plain result, not a link profile")
    elif args.link_in:
        result = {**link, "shared_efficiency": eta, "sharing": {
            "method": "sarlab.real.calibration.roundbench: gloo ranks, one per emulated host, no compute; pass "
                      "times of the "
                      "patterns with concurrent flows against the model's T (1 + (K - 1) / eta), median",
            "date": datetime.date.today().isoformat(), **result}}
    return lines, result


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    patterns = [p.strip() for p in args.patterns.split(",") if p.strip()]
    for p in patterns:
        if not PATTERN.fullmatch(p):
            parser.error(f"pattern {p!r}: write ring:D, oneshot, global or global-a2a")
    if args.child:
        _child(patterns, args.bytes, args.repeats, args.spin_ms / 1e3, args.rounds, args.samples, args.backend)
        return 0
    if args.world < 2:
        parser.error("--world must be at least 2")
    from sarlab.real.launch.netspec import NetSpec

    spec = NetSpec.parse(args.net)
    if args.link and args.link_in:
        parser.error("give --link or --link-in, not both")
    link_path = args.link_in or args.link
    link = json.loads(Path(link_path).read_text()) if link_path else {}
    bandwidth = args.bandwidth_Bps or float(link.get("bandwidth_bidir_Bps") or 0.0) or (
        0.95 * spec.rate_bps / 8 if spec.emulated else 0.0)
    profile, source = resolve_profile(args.profile)
    model = model_table(patterns, args.world, args.bytes, model_link(profile, bandwidth, link_path), profile,
                        args.rounds, args.spin_ms / 1e3)
    title = (f"{args.net} N={args.world} {args.bytes / 1e6:g} MB spin {args.spin_ms:g} ms; model: profile "
             f"{profile.name} ({source}), message software {profile.p2p_call_s * 1e6:.0f} us + "
             f"{profile.p2p_op_s * 1e6:.0f} us per op posted + {profile.p2p_wait_s * 1e6:.0f} us per op waited")
    if args.predict:
        print("\n".join([title, *table_lines(model)]), flush=True)
        if args.out:
            Path(args.out).write_text(json.dumps({"net": args.net, "world": args.world, "bytes": args.bytes,
                                                  "rounds": args.rounds, "spin_ms": args.spin_ms,
                                                  "profile": source, "model": model}, indent=1))
        return 0
    lines, result = _measured(args, patterns, bandwidth, model, title, source, link)
    print("\n".join(lines), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
