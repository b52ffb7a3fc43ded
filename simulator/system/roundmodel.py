"""The exchange patterns of :mod:`sarlab.real.calibration.roundbench` and what the simulator's round model predicts
for them.

A pass of ``N`` ranks with no tensor work: ``ring:D`` (``N - 1`` pairwise rounds, ``D + 1`` in flight, as
:mod:`sarlab.core.aggregate` posts them), ``oneshot`` (every exchange in one call) and the SAR library's rounds
(``global``, ``global-a2a``: each round one exchange with every peer, the round's message to ``p + r`` and from
``p - r`` and a 4-byte tensor to and from each of the ``N - 2`` others). :func:`model_pass` runs such a pass through
the simulator's own booking (:class:`sarlab.simulator.network.network.Network`,
:class:`sarlab.simulator.system.clock.WorkerClocks`) with a profile's measured message software and its
``round_sync="global"`` rule, so a ``roundbench`` measurement reads against the model in one table
(:func:`sarlab.real.calibration.roundbench.table_lines`). No new constants: the link is a link profile's or the
profile's, the software the profile's ``p2p_*`` costs.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import replace

import simpy

from sarlab.simulator.hardware.profile import Link, Profile
from sarlab.simulator.network.linkprofile import read_link_profile
from sarlab.simulator.network.network import Network
from sarlab.simulator.system.clock import Proc, Worker, WorkerClocks
from sarlab.simulator.system.memory import MemoryTracker

#: the patterns a pass can run (``ring:D`` with any prefetch depth ``D``)
PATTERN = re.compile(r"ring:\d+|oneshot|global|global-a2a")
DUMMY_BYTES = 4  #: the 1-element fp32 tensor a global round sends every peer that is not the round's


def round_count(pattern: str, world: int, rounds: int = 0) -> int:
    """Rounds of a pass: ``oneshot`` 1 exchange of ``N - 1`` messages, counted as ``N - 1``; the others ``rounds``
    (0: ``N - 1``)."""
    return world - 1 if pattern == "oneshot" or not rounds else rounds


def concurrent(pattern: str) -> bool:
    """Whether a pattern has several bulk flows on a link end at once (``ring:D`` with ``D >= 1``, ``oneshot``);
    ``ring:0`` and the global rounds have one (plus 4-byte tensors)."""
    return pattern == "oneshot" or (pattern.startswith("ring:") and int(pattern.split(":")[1]) >= 1)


def pass_bytes(pattern: str, world: int, nbytes: int, rounds: int = 0) -> int:
    """Bytes one rank sends in a pass: a message of ``4 max(1, bytes // 4)`` per round (fp32 elements), and in a
    global round a :data:`DUMMY_BYTES` tensor to each of the ``N - 2`` other peers."""
    count = round_count(pattern, world, rounds)
    dummies = count * (world - 2) * DUMMY_BYTES if pattern.startswith("global") else 0
    return count * 4 * max(1, nbytes // 4) + dummies


def model_link(profile: Profile, bandwidth_Bps: float, link_in: str | None = None) -> Link:
    """The link the model runs a pass on: ``link_in``'s (:func:`sarlab.simulator.network.linkprofile.read_link_profile`,
    with ``bandwidth_Bps`` where given), else, on an emulated link of ``bandwidth_Bps``, that bandwidth with the
    profile's intra-host latency and gap (what the reader assumes of a profile without them), else (loopback)
    the profile's intra-host link."""
    if link_in:
        link = read_link_profile(link_in, profile).link
        return replace(link, bandwidth_Bps=bandwidth_Bps) if bandwidth_Bps else link
    if bandwidth_Bps:
        return Link(profile.intra_host.latency_s, bandwidth_Bps, profile.intra_host.gap_s)
    return profile.intra_host


def model_pass(pattern: str, world: int, nbytes: int, link: Link, profile: Profile, rounds: int = 0,
               spin_s: float = 0.0) -> float:
    r"""The simulator's time of one pass of ``pattern`` (its round model, no tensor work): the slowest worker's.

    ``world`` workers, one per NIC on ``link``, each on its own cores, message bytes as :func:`pass_bytes`'s,
    booked by :class:`sarlab.simulator.network.network.Network` through
    :class:`sarlab.simulator.system.clock.WorkerClocks` as the schedule books them. Every exchange call costs the
    profile's software, :math:`c + o \cdot ops` before its messages leave and :math:`w \cdot ops` after they arrive
    (``p2p_call_s``, ``p2p_op_s``, ``p2p_wait_s``), and may wait its jitter draw (``round_jitter_s``). ``ring:D``: 2 ops
    per round, ``D + 1`` rounds in flight; ``oneshot``: one call of ``2 (N - 1)`` ops; ``global`` and ``global-a2a``:
    the SAR library's rounds (``RunSpec(round_sync="global")``): ``2 (N - 1)`` ops per round, waited before the next,
    and the round's messages arrive only once every worker joined it plus :math:`(N - 2) g + L`
    (:meth:`sarlab.simulator.system.clock.WorkerClocks.round_sync`). ``spin_s`` per round is compute, as ``--spin-ms``.
    """
    N, b = world, 4 * max(1, nbytes // 4)
    K = round_count(pattern, N, rounds)
    glob = pattern.startswith("global")
    depth = -1 if pattern == "oneshot" else 0 if glob else int(pattern.split(":")[1])
    call, op_s, wait_s = profile.p2p_call_s, profile.p2p_op_s, profile.p2p_wait_s
    env = simpy.Environment()
    net = Network(env, N, link, profile.intra_host, workers_per_nic=1)
    clocks = WorkerClocks(env, net, N, None, 1, False, {}, 0.0, 1.0, jitter_s=profile.round_jitter_s)
    workers = [Worker(p, MemoryTracker()) for p in range(N)]

    def worker(w: Worker) -> Proc:
        ops = 2 * (N - 1) if glob or depth < 0 else 2
        in_flight: deque[tuple] = deque()

        def post(k: int) -> Proc:
            clocks.tick(w, call + op_s * ops, ("post", k))
            yield from clocks.sync(w)
            clocks.jitter(w)
            if depth < 0:
                msgs = tuple(m for r in range(1, N) for m in clocks.exchange(w, "f", 0, r, b, b, w.clock))
            else:
                msgs = clocks.exchange(w, "f", k // (N - 1), 1 + k % (N - 1), b, b, w.clock)
            if glob:
                msgs = (*msgs, clocks.round_sync(w, (k,), w.clock))
            in_flight.append(msgs)

        todo = 1 if depth < 0 else K
        nxt = 0
        while nxt < todo and len(in_flight) <= max(depth, 0):
            yield from post(nxt)
            nxt += 1
        while in_flight:
            yield from clocks.wait(w, in_flight.popleft(), ("wait",))
            clocks.tick(w, wait_s * ops + spin_s * (N - 1 if depth < 0 else 1), ("after",))
            if nxt < todo:
                yield from post(nxt)
                nxt += 1

    for w in workers:
        env.process(worker(w))
    env.run()
    if net.unmatched():
        raise RuntimeError(f"model_pass {pattern}: messages never matched: {net.unmatched()[:3]}")
    return max(w.clock for w in workers)


def model_table(patterns: list[str], world: int, nbytes: int, link: Link, profile: Profile, rounds: int = 0,
                spin_s: float = 0.0) -> dict[str, dict]:
    """Per pattern the model's pass and per-round time (:func:`model_pass`; per round as :func:`summarize`)."""
    table = {}
    for pattern in patterns:
        t = model_pass(pattern, world, nbytes, link, profile, rounds, spin_s)
        table[pattern] = {"pass_s": t, "round_s": t / round_count(pattern, world, rounds)}
    return table
