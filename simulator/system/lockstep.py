"""The lockstep executor: the schedule run once for all workers at a time, as numpy arrays (large N, fast).

Every worker runs the same sequence of steps (:mod:`sarlab.simulator.system.schedule`; the ranks differ only in their
numbers), so instead of one SimPy process per worker, :class:`sarlab.simulator.system.schedule.Schedule` can run once
with a
:class:`VectorWorker` whose clock, counters and memory are arrays over the ranks, and with clocks
(:class:`LockstepClocks`) that implement the rule of :mod:`sarlab.simulator.system.clock` element-wise:

* compute adds seconds to every rank's clock;
* an exchange posted in round ``r`` by every rank at once is matched at once: the message ``p -> p + r`` is
  ready when both ends have posted, :math:`\\max(t_p, t_{p+r})`; it holds the sender's send channel and the
  receiver's receive channel for ``g + b/B`` (``b / (eta B)`` on a shared link end,
  :mod:`sarlab.simulator.network.sharing`; first come, first served in posting order: each channel keeps the time it is
  free) and arrives ``L`` later, as
  :class:`sarlab.simulator.network.network.Network` books it;
* waiting for messages moves each clock to the latest delivery (booked as wait);
* an all-reduce ends for all an all-reduce time after the last rank joined.

Nothing blocks, so there are no events: an epoch costs a few numpy operations per round, ~1-2 s for 1,024
workers and 3 layers. It applies where each worker owns its NIC channels (one worker per NIC, or all on one
host) and no cores are shared (:func:`applies`); elsewhere, and for traces, the per-worker SimPy executor
(:mod:`sarlab.simulator.system.epoch`) runs. The two agree exactly (``tests/test_simulator_lockstep.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from sarlab.simulator.hardware.profile import Link
from sarlab.simulator.network.collectives import allreduce_seconds
from sarlab.simulator.network.sharing import shared_efficiency
from sarlab.simulator.system.clock import Proc
from sarlab.simulator.system.jitter import jitter_delays
from sarlab.simulator.system.runspec import Placement, RunSpec
from sarlab.simulator.system.spread import spread_factors


def applies(run: RunSpec, placement: Placement, workers: int) -> bool:
    """Whether the lockstep executor can run this configuration (see the module docstring)."""
    one_nic_each = placement.workers_per_nic == 1 or placement.workers_per_nic >= workers
    return placement.core_slots is None and one_nic_each and run.network == "reserve" and not run.trace


class VectorMemory:
    """:class:`sarlab.simulator.system.memory.MemoryTracker` for all ranks at once (current and peak bytes as
    arrays)."""

    __slots__ = ("current", "peak", "now")

    def __init__(self, start: np.ndarray) -> None:
        self.current = np.array(start, dtype=np.float64)
        self.peak = self.current.copy()
        self.now = 0.0

    def alloc(self, nbytes: Any) -> None:
        self.current += nbytes
        np.maximum(self.peak, self.current, out=self.peak)

    def free(self, nbytes: Any) -> None:
        self.current -= nbytes


class VectorWorker:
    """All ranks as one worker: ``rank`` is ``arange(N)``, clocks and counters are arrays."""

    def __init__(self, workers: int, start_bytes: np.ndarray) -> None:
        self.rank = np.arange(workers)
        self.key = -1  # the key of per-worker state in the schedule (a scalar worker's is its rank)
        self.mem = VectorMemory(start_bytes)
        zeros = np.zeros(workers)
        self.clock, self.compute_s, self.wait_s = zeros.copy(), zeros.copy(), zeros.copy()
        self.sent, self.recv = zeros.copy(), zeros.copy()
        self.intervals: list = []


class VectorMessage:
    """The messages of one exchange direction for all ranks: their delivery times (0 for empty ones)."""

    __slots__ = ("deliver_at",)

    def __init__(self, deliver_at: np.ndarray) -> None:
        self.deliver_at = deliver_at


def _no_event() -> Proc:
    return
    yield  # a generator that finishes at once (the lockstep clocks never wait for an event)


class LockstepClocks:
    """The clock primitives of :class:`sarlab.simulator.system.clock.WorkerClocks`, element-wise over all ranks.

    Args:
        workers: ``N``.
        inter_host, intra_host: the links; ranks ``h * workers_per_nic ...`` share NIC ``h``.
        workers_per_nic: placement (1, or ``>= N``: one host).
        jitter_s, seed: mean per-round delay and its seed (:mod:`sarlab.simulator.system.jitter`).
        spread: ``sigma`` of uneven progress between exchange calls (:mod:`sarlab.simulator.system.spread`; 0 = even).
    """

    pools = None
    env = None

    def __init__(self, workers: int, inter_host: Link, intra_host: Link, workers_per_nic: int,
                 jitter_s: float = 0.0, seed: int = 0, spread: float = 0.0) -> None:
        self.N = workers
        self.ranks = np.arange(workers)
        self.host = self.ranks // max(workers_per_nic, 1)
        self.inter, self.intra = inter_host, intra_host
        self.collective_link = inter_host if workers_per_nic < workers else intra_host
        self.send_free = np.zeros(workers)
        self.recv_free = np.zeros(workers)
        self.jitter_s, self.seed, self.spread = jitter_s, seed, spread
        self.posts = np.zeros(workers, dtype=np.int64)
        self.factor = spread_factors(spread, seed, self.ranks, self.posts)
        self.matched = 0
        self.steps = 0  # exchanges and all-reduces, each one step for all ranks (reported as "events")

    def compute(self, w: VectorWorker, seconds: Any, what: tuple) -> Proc:
        self.tick(w, seconds, what)
        return _no_event()

    def tick(self, w: VectorWorker, seconds: Any, what: tuple) -> None:
        self._advance(w, seconds * self.factor if self.spread > 0.0 else seconds)

    def _advance(self, w: VectorWorker, seconds: Any) -> None:
        w.clock = w.clock + seconds
        w.compute_s = w.compute_s + seconds

    def catch_up(self, w: VectorWorker) -> None:
        return None

    def sync(self, w: VectorWorker) -> Proc:
        return _no_event()

    def arrive(self, w: VectorWorker, ready: np.ndarray, what: tuple) -> None:
        late = np.maximum(ready - w.clock, 0.0)
        w.clock = w.clock + late
        w.wait_s = w.wait_s + late

    def arrive_all(self, w: VectorWorker, messages: tuple, what: tuple) -> bool:
        ready = messages[0].deliver_at
        for msg in messages[1:]:
            ready = np.maximum(ready, msg.deliver_at)
        self.arrive(w, ready, what)
        return True

    def round_sync(self, w: VectorWorker, key: tuple, at: np.ndarray) -> VectorMessage:
        link = self.collective_link
        self.steps += 1
        return VectorMessage(np.full(self.N, float(np.max(at)) + (self.N - 2) * link.gap_s + link.latency_s))

    def wait(self, w: VectorWorker, messages: Iterable[VectorMessage], what: tuple) -> Proc:
        ready = np.zeros(self.N)
        for msg in messages:
            np.maximum(ready, msg.deliver_at, out=ready)
        self.arrive(w, ready, what)
        return _no_event()

    def allreduce(self, w: VectorWorker, nbytes: float, what: tuple) -> Proc:
        if self.N > 1:
            moved = 2.0 * (self.N - 1) / self.N * nbytes
            w.sent = w.sent + moved
            w.recv = w.recv + moved
            self.steps += 1
            end = float(w.clock.max()) + allreduce_seconds(self.collective_link, nbytes, self.N)
            w.wait_s = w.wait_s + (end - w.clock)
            w.clock = np.full(self.N, end)
        return _no_event()

    def jitter(self, w: VectorWorker) -> None:
        """Every rank's next exchange call is delayed by its jitter draw (booked as compute)."""
        if self.jitter_s > 0.0:
            self._advance(w, jitter_delays(self.jitter_s, self.seed, self.ranks, self.posts))
        self.posts += 1
        if self.spread > 0.0:  # the next segment's factors
            self.factor = spread_factors(self.spread, self.seed, self.ranks, self.posts)

    def exchange(self, w: VectorWorker, phase: str, li: int, r: int, send_bytes: Any, recv_bytes: Any,
                 at: np.ndarray) -> tuple[VectorMessage, VectorMessage]:
        """Every rank ``p`` sends ``send_bytes[p]`` to ``p + r`` and receives ``recv_bytes[p]`` from ``p - r``,
        posted at ``at[p]``; empty messages are not sent."""
        N, p = self.N, self.ranks
        dst = (p + r) % N
        nbytes = np.broadcast_to(np.asarray(send_bytes, dtype=np.float64), (N,))
        same = self.host == self.host[dst]
        ready = np.maximum(at, at[dst])  # both ends posted
        bw = np.where(same, self.intra.bandwidth_Bps, self.inter.bandwidth_Bps)
        # a channel still busy at the ready time: concurrent flows share the link end at a loss
        # (sarlab.simulator.network.sharing)
        shared = (self.send_free > ready) | (self.recv_free[dst] > ready)
        bw = np.where(shared, bw * np.where(same, shared_efficiency(self.intra), shared_efficiency(self.inter)), bw)
        occupancy = np.where(same, self.intra.gap_s, self.inter.gap_s) + nbytes / bw
        latency = np.where(same, self.intra.latency_s, self.inter.latency_s)
        real = nbytes > 0
        start = np.maximum(ready, self.send_free)  # send channel free
        received = np.maximum(start, self.recv_free[dst])
        end = received + occupancy
        self.send_free = np.where(real, start + occupancy, self.send_free)
        self.recv_free[dst] = np.where(real, end, self.recv_free[dst])
        deliver = np.where(real, end + latency, 0.0)
        self.matched += int(real.sum())
        self.steps += 1
        w.sent = w.sent + nbytes
        w.recv = w.recv + recv_bytes
        return VectorMessage(deliver), VectorMessage(deliver[(p - r) % N])
