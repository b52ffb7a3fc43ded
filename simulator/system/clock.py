"""The per-worker clock: each worker's own time, which runs ahead of the SimPy clock between syncs.

The rule. Every worker ``w`` has a clock ``t_w`` and the simulation has ``now``, with ``t_w >= now``:

* computing ``s`` seconds moves ``t_w`` to ``t_w + s`` and books ``s`` as compute; no SimPy event (with
  shared cores the worker first lets ``now`` reach ``t_w``, then runs the op on its host's
  :class:`sarlab.simulator.network.network.SharedCores`, which is an event);
* waiting for messages whose delivery time ``d`` is known (booked: both ends posted, channels' turn come)
  moves ``t_w`` to ``max(t_w, d)`` and books the difference as communication wait; no event. Only a message
  not booked yet blocks the worker (it yields the message's event and resumes at its delivery);
* before posting a message the worker syncs: it lets ``now`` catch up with ``t_w`` (one timeout event), since
  the NIC channels serve messages in the order they are posted (:mod:`sarlab.simulator.network.network`); an exchange
  call may then be delayed by its per-round jitter (:mod:`sarlab.simulator.system.jitter`), booked as compute, and its
  messages post at the delayed ``t_w``;
* with a progress spread (:mod:`sarlab.simulator.system.spread`) the compute between a worker's ``k``-th and ``k+1``-th
  exchange call is multiplied by its draw ``f_{wk}`` (the same draws in both executors);
* an all-reduce is joined at ``t_w`` and ends for every worker an all-reduce time
  (:func:`sarlab.simulator.network.collectives.allreduce_seconds`) after the last one joined; from ``t_w`` to the end
  is booked as wait, as the engine books it.

So an epoch costs about one SimPy event per message, and a worker's epoch time is its clock at the end. The
lockstep executor (:mod:`sarlab.simulator.system.lockstep`) applies the same rule to all workers at once, as arrays.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy

from sarlab.simulator.network.network import Message, SharedCores
from sarlab.simulator.system.jitter import jitter_delays
from sarlab.simulator.system.memory import MemoryTracker
from sarlab.simulator.system.result import Interval
from sarlab.simulator.system.spread import spread_factors

Proc = Generator[simpy.Event, Any, None]


@dataclass
class Worker:
    """One worker's clock and counters (its clock may run ahead of the simulation between syncs)."""

    rank: int
    mem: MemoryTracker
    clock: float = 0.0
    compute_s: float = 0.0
    wait_s: float = 0.0
    sent: float = 0.0
    recv: float = 0.0
    intervals: list[Interval] = field(default_factory=list)

    @property
    def key(self) -> int:
        """The key of this worker's state in the schedule (the lockstep executor's all-ranks worker has -1)."""
        return self.rank


def _delivered() -> Message:
    """A message slot for an exchange direction with nothing to send (always already delivered)."""
    msg = Message(simpy.Environment(), -1, -1, 0.0, -1, None)
    msg.deliver_at = 0.0
    return msg


DELIVERED = _delivered()
PHASES = {"f": 0, "r": 1, "g": 2}  # forward fetch, backward re-fetch, gradient return


class WorkerClocks:
    """The clock primitives of one epoch run (see the module docstring), shared by all its workers.

    Args:
        env: the SimPy environment.
        net: the network (:data:`sarlab.simulator.network.network.NETWORKS`), where messages are posted and all-reduces
            joined.
        workers: number of workers ``N``.
        pools: one :class:`SharedCores` per host, or ``None`` when workers do not share cores.
        workers_per_host: placement (ranks ``h * workers_per_host ...`` sit on host ``h``).
        trace: record Gantt intervals.
        share_eta: co-located process efficiency per kind of compute segment (``what[:2]``).
        copy_s_per_byte, copy_eta: CPU seconds per point-to-point byte run on the host's shared cores, and
            their co-located efficiency (0: no such work).
        copy_s_per_message: CPU seconds per message (gloo's threads) run there likewise.
        jitter_s, seed: mean per-round delay of an exchange call and the seed of its draws
            (:mod:`sarlab.simulator.system.jitter`).
        spread: ``sigma`` of the workers' uneven progress between exchange calls (:mod:`sarlab.simulator.system.spread`;
            0 = even).
    """

    def __init__(
        self,
        env: simpy.Environment,
        net: Any,
        workers: int,
        pools: list[SharedCores] | None,
        workers_per_host: int,
        trace: bool,
        share_eta: dict[tuple, float],
        copy_s_per_byte: float,
        copy_eta: float,
        copy_s_per_message: float = 0.0,
        jitter_s: float = 0.0,
        seed: int = 0,
        spread: float = 0.0,
    ) -> None:
        self.env, self.net, self.N, self.pools = env, net, workers, pools
        self.workers_per_host, self.trace, self.share_eta = workers_per_host, trace, share_eta
        self.copy_s_per_byte, self.copy_eta, self.copy_s_per_message = copy_s_per_byte, copy_eta, copy_s_per_message
        self.jitter_s, self.seed, self.spread = jitter_s, seed, spread
        self.posts = [0] * workers
        self.factor = [float(f) for f in spread_factors(spread, seed, range(workers), [0] * workers)]
        self.allreduce_seq = [0] * workers

    def compute(self, w: Worker, seconds: float, what: tuple) -> Proc:
        """Worker ``w`` computes ``seconds``: its clock moves on (no SimPy event), unless cores are shared.

        With shared cores the worker first lets the simulation catch up with its clock, then runs the op
        on its host's :class:`SharedCores`, so compute of co-located workers contends.
        """
        if seconds <= 0.0:
            return
        seconds *= self.factor[w.rank]
        if self.pools is None:
            self._advance(w, seconds, what)
            return
        env = self.env
        if w.clock > env.now:
            yield env.timeout(w.clock - env.now)
        pool = self.pools[w.rank // self.workers_per_host]
        start = env.now
        yield pool.run(seconds, self.share_eta.get(what[:2], 1.0))
        w.clock = w.mem.now = env.now
        w.compute_s += env.now - start
        if self.trace:
            w.intervals.append(Interval(start, env.now, "compute", what))

    def tick(self, w: Worker, seconds: float, what: tuple) -> None:
        """:meth:`compute` without shared cores: move the worker's clock (no generator, no event)."""
        self._advance(w, seconds * self.factor[w.rank], what)

    def _advance(self, w: Worker, seconds: float, what: tuple) -> None:
        """Move the worker's clock by ``seconds`` booked as compute (as they are: no spread factor)."""
        if seconds > 0.0:
            start = w.clock
            w.clock = w.mem.now = start + seconds
            w.compute_s += seconds
            if self.trace:
                w.intervals.append(Interval(start, w.clock, "compute", what))

    def wait(self, w: Worker, messages: tuple[Message, ...], what: tuple) -> Proc:
        """Worker ``w`` waits until all ``messages`` are delivered; blocks (yields) only on unbooked ones.

        A booked message's delivery time is known, so waiting for it just moves the worker's clock.
        The time from the worker's clock to delivery is booked as communication wait.
        """
        start = ready = w.clock
        for msg in messages:
            t = msg.deliver_at
            if t < 0.0:  # not booked yet: block until it is delivered
                yield msg
                t = self.env.now
            if t > ready:
                ready = t
        if ready > start:
            w.clock = w.mem.now = ready
            w.wait_s += ready - start
            if self.trace:
                w.intervals.append(Interval(start, ready, "wait", what))

    def arrive_all(self, w: Worker, messages: tuple[Message, ...], what: tuple) -> bool:
        """:meth:`arrive` at the latest delivery of ``messages`` when all are booked; False (nothing done)
        when one is not, and the caller must :meth:`wait`."""
        ready = w.clock
        for msg in messages:
            t = msg.deliver_at
            if t < 0.0:
                return False
            if t > ready:
                ready = t
        self.arrive(w, ready, what)
        return True

    def round_sync(self, w: Worker, key: tuple, at: float) -> Message:
        """Join round ``key`` as the SAR paper's library runs it (one ``all_to_all`` of all ``N`` workers per
        round, 1-element tensors to the ``N - 2`` peers it has nothing for): delivered when the last worker has
        joined plus the dummies' channel time and one latency, :math:`(N-2) g + L`."""
        link = self.net.collective_link
        return self.net.allreduce(("round", *key), 0.0, at, (self.N - 2) * link.gap_s + link.latency_s)

    def arrive(self, w: Worker, ready: float, what: tuple) -> None:
        """:meth:`wait` for messages delivered at a known time ``ready``: move the clock, book the wait."""
        start = w.clock
        if ready > start:
            w.clock = w.mem.now = ready
            w.wait_s += ready - start
            if self.trace:
                w.intervals.append(Interval(start, ready, "wait", what))

    def allreduce(self, w: Worker, nbytes: float, what: tuple) -> Proc:
        """Join the next all-reduce (every worker calls them in the same order); booked as wait, as the
        engine books it."""
        if self.N <= 1:
            return
        seq = self.allreduce_seq[w.rank]
        self.allreduce_seq[w.rank] += 1
        moved = 2.0 * (self.N - 1) / self.N * nbytes
        w.sent += moved
        w.recv += moved
        start = w.clock
        yield self.net.allreduce(seq, nbytes, start)
        w.clock = w.mem.now = self.env.now
        w.wait_s += w.clock - start
        if self.trace and w.clock > start:
            w.intervals.append(Interval(start, w.clock, "allreduce", what))

    def catch_up(self, w: Worker) -> simpy.Event | None:
        """The timeout that lets the simulation reach the worker's clock (None when it has): what
        :meth:`sync` yields, for callers that ``tick``."""
        if w.clock > self.env.now:
            return self.env.timeout(w.clock - self.env.now)
        return None

    def jitter(self, w: Worker) -> None:
        """Delay the worker's next exchange call by its jitter draw (booked as compute; the caller has
        synced, and posts at the worker's clock)."""
        k = self.posts[w.rank]
        self.posts[w.rank] = k + 1
        if self.spread > 0.0:  # the next segment's factor
            self.factor[w.rank] = float(spread_factors(self.spread, self.seed, w.rank, k + 1))
        if self.jitter_s > 0.0:
            self._advance(w, float(jitter_delays(self.jitter_s, self.seed, w.rank, k)), ("jitter",))

    def sync(self, w: Worker) -> Proc:
        """Let the simulation clock catch up with the worker's before it posts messages.

        Workers run ahead of the simulation while they compute and while they wait for messages whose
        delivery time is known; posting must happen in time order, because the NIC channels serve
        messages in the order they are matched (see :mod:`sarlab.simulator.network.network`).
        """
        if w.clock > self.env.now:
            yield self.env.timeout(w.clock - self.env.now)

    def exchange(
        self, w: Worker, phase: str, li: int, r: int, send_bytes: float, recv_bytes: float, at: float
    ) -> tuple[Message, Message]:
        """Post one exchange at time ``at`` (the caller has synced): send ``send_bytes`` to ``p + r``,
        receive ``recv_bytes`` from ``p - r``. Empty messages are not sent (the engine skips them)."""
        N, p = self.N, w.rank
        q_out, q_in = (p + r) % N, (p - r) % N
        post = self.net.post
        base = (li * 3 + PHASES[phase]) * N  # an int key per (layer, phase, src, dst)
        s = post((base + p) * N + q_out, p, q_out, send_bytes, p, at) if send_bytes > 0 else DELIVERED
        v = post((base + q_in) * N + p, q_in, p, recv_bytes, p, at) if recv_bytes > 0 else DELIVERED
        w.sent += send_bytes
        w.recv += recv_bytes
        if self.copy_s_per_byte or self.copy_s_per_message:  # copies run in the background on the host's cores
            ops = (send_bytes > 0) + (recv_bytes > 0)
            self.pools[p // self.workers_per_host].run(
                self.copy_s_per_byte * (send_bytes + recv_bytes) + self.copy_s_per_message * ops, self.copy_eta
            )
        return s, v
