"""Network and CPU contention for the epoch model: NIC channels, point-to-point messages, all-reduces.

Every worker has a full-duplex NIC: one send channel and one receive channel, each a single server.
A message from ``src`` to ``dst`` is *matched* once both ends have posted it (the sender its ``isend``,
the receiver its ``irecv``). Its bytes then stream cut-through: they leave on ``send[src]`` as soon as
that channel is free, and enter ``recv[dst]`` once the sender has started and that channel is free;
each channel is held for ``g + bytes / B`` (:class:`simulator.profile.Link`) and the message is
delivered ``L`` after the receive side ends. The network in between buffers what a busy receiver
cannot take yet, so a busy receiver never stalls its senders' other messages (NICs are work-conserving).
Messages that share a channel queue, which is where contention shows (incast in ``oneshot``'s
all-to-all, overlapping prefetched rounds in ``sar``).

Two implementations of the channels, with the same interface:

* :class:`Network` (default, ``discipline="reserve"``): each channel is a :class:`Calendar`; a matched
  message books the earliest idle gap of its send channel at or after both ends' post times, then the
  earliest gap of its receive channel at or after that. Its delivery time is known when it is matched,
  so a message costs at most one SimPy event (none when nobody is blocked on it), which keeps a
  128-worker epoch under a second.
* :class:`ResourceNetwork` (``discipline="simpy"``): the same servers as ``simpy.Resource`` objects,
  one process per message; its receive request is made when its sender starts, so a receive channel
  serves messages first come, first served. Slower; it is the literal reference the fast one is tested
  against. The two differ only in the order in which messages waiting for one receive channel go.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy
from simpy.events import NORMAL, PENDING

from simulator.costs import allreduce_seconds
from simulator.profile import Link


class SharedCores:
    """Processor sharing of one host's cores among its workers' compute ops (as the OS time-slices them).

    ``slots`` = cores / threads per worker. While ``k`` ops run on the host, op ``j`` progresses at

    .. math::
        \\rho_j(k) = \\frac{1 + (\\min(k, S) - 1)\\,\\eta_j}{k}

    of its solo speed: up to ``S`` ops run side by side but share the memory system (``eta_j`` is the
    efficiency of each extra co-located process for that op's mix, measured by calibration; 1 = no
    interference), and beyond ``S`` they also take turns on the cores. An op of ``s`` solo seconds run
    alone takes ``s``; the host's throughput never exceeds ``1 + (S - 1) eta``.

    Args:
        env: the SimPy environment.
        slots: ``S``, ops that can run at once without time slicing.
    """

    __slots__ = ("env", "slots", "jobs", "last", "generation")

    def __init__(self, env: simpy.Environment, slots: float) -> None:
        if slots < 1:
            raise ValueError("SharedCores needs at least one slot")
        self.env, self.slots = env, float(slots)
        self.jobs: list[list] = []  # [remaining solo seconds, eta, event]
        self.last = 0.0
        self.generation = 0

    def _rate(self, eta: float, k: int) -> float:
        return (1.0 + (min(k, self.slots) - 1.0) * eta) / k

    def _advance(self) -> None:
        now = self.env.now
        dt = now - self.last
        if dt > 0 and self.jobs:
            k = len(self.jobs)
            for job in self.jobs:
                job[0] -= dt * self._rate(job[1], k)
        self.last = now

    def run(self, seconds: float, eta: float) -> simpy.Event:
        """An event that fires when an op of ``seconds`` solo seconds, started now, is done."""
        self._advance()
        done = self.env.event()
        self.jobs.append([seconds, eta, done])
        self._reschedule()
        return done

    def _reschedule(self) -> None:
        self.generation += 1
        if not self.jobs:
            return
        k = len(self.jobs)
        wait = min(job[0] / self._rate(job[1], k) for job in self.jobs)
        timer = self.env.timeout(max(wait, 0.0))
        generation = self.generation
        timer.callbacks.append(lambda _event: self._tick(generation))

    def _tick(self, generation: int) -> None:
        if generation != self.generation:  # superseded by a later arrival
            return
        self._advance()
        tol = 1e-12 * max(1.0, self.env.now)
        finished = [job for job in self.jobs if job[0] <= tol]
        self.jobs = [job for job in self.jobs if job[0] > tol]
        for job in finished:
            job[2].succeed()
        self._reschedule()


class Calendar:
    """The busy times of one NIC channel: disjoint blocks, sorted; touching bookings merge into one block.

    :meth:`book` puts a message in the earliest idle gap at or after its ready time that fits it, so a
    message never waits behind a later booking it could have gone before (the channel is
    work-conserving), and the result does not depend on the order in which simultaneous posts are
    processed. An incast of back-to-back messages stays one block, so a search skips it at once.
    """

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def book(self, ready: float, occupancy: float, now: float) -> float:
        """Book ``occupancy`` seconds at the earliest idle time >= ``ready``; returns the start."""
        starts, ends = self.starts, self.ends
        if not ends or ends[-1] <= ready:  # nothing booked after `ready`: the common case
            if occupancy > 0:
                if ends and ends[-1] == ready:
                    ends[-1] = ready + occupancy
                else:
                    starts.append(ready)
                    ends.append(ready + occupancy)
                if len(ends) > 64:
                    del starts[:32], ends[:32]
            return ready
        if len(ends) > 32:  # forget blocks that are over
            done = bisect_right(ends, now)
            if done:
                del starts[:done], ends[:done]
        i = bisect_right(ends, ready)  # first block still busy after `ready`
        t = ready
        n = len(starts)
        while i < n and starts[i] < t + occupancy:
            if ends[i] > t:
                t = ends[i]
            i += 1
        if occupancy <= 0:
            return t
        end = t + occupancy
        if i > 0 and ends[i - 1] == t:  # extends the block before
            if i < n and starts[i] == end:
                ends[i - 1] = ends[i]
                del starts[i], ends[i]
            else:
                ends[i - 1] = end
        elif i < n and starts[i] == end:  # extends the block after
            starts[i] = t
        else:
            starts.insert(i, t)
            ends.insert(i, end)
        return t


class Message(simpy.Event):
    """A point-to-point message; as an event it fires when the message has been delivered.

    With the reservation network the delivery time ``deliver_at`` is known as soon as the message is
    matched, and the event is only scheduled if a worker is already blocked on it: a worker that
    arrives later reads ``deliver_at`` instead of yielding (see ``EpochModel._await``).

    Args:
        env: the SimPy environment.
        src, dst: sending and receiving worker.
        nbytes: payload.
        posted_by: the worker that posted the first end.
        key: the matching key.
    """

    ready_at = 0.0  # both ends have really posted it (a worker may post ahead of the simulation clock)
    start = -1.0  # bytes start leaving the sender
    end = -1.0  # bytes have entered the receiver
    deliver_at = -1.0  # delivered (known once matched; -1 before)

    def __init__(self, env: simpy.Environment, src: int, dst: int, nbytes: float, posted_by: int, key: Any) -> None:
        # inlined simpy.Event.__init__ (as simpy.Timeout does): this runs once per message
        self.env = env
        self.callbacks: list = []
        self._value = PENDING
        self.src, self.dst, self.nbytes, self.posted_by, self.key = src, dst, nbytes, posted_by, key

    def deliver_after(self, delay: float) -> None:
        """Trigger this event ``delay`` seconds from now (what ``simpy.Timeout`` does at construction)."""
        self._ok = True
        self._value = None
        self.env.schedule(self, NORMAL, delay)


@dataclass
class _Collective:
    arrived: int
    done: Message
    nbytes: float
    latest: float = 0.0


@dataclass
class Network:
    """Point-to-point messages and all-reduces between ``workers`` workers placed on hosts (reservation).

    Args:
        env: the SimPy environment.
        workers: number of workers ``N``.
        inter_host: link between hosts; intra_host: link inside a host.
        workers_per_host: placement (worker ``p`` sits on host ``p // workers_per_host``).
        trace: keep every message (for the Gantt chart).
    """

    env: simpy.Environment
    workers: int
    inter_host: Link
    intra_host: Link
    workers_per_host: int
    trace: bool = False
    transfers: list[Message] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.matched = 0
        self._pending: dict[Any, Message] = {}
        self._collectives: dict[Any, _Collective] = {}
        self.hosts = -(-self.workers // self.workers_per_host)
        # All-reduces cross hosts whenever there is more than one host.
        self.collective_link = self.inter_host if self.hosts > 1 else self.intra_host
        self._setup_channels()

    def _setup_channels(self) -> None:
        # per channel: booked busy blocks, sorted and disjoint (so their ends are sorted too)
        self.send_cal = [Calendar() for _ in range(self.workers)]
        self.recv_cal = [Calendar() for _ in range(self.workers)]

    def link(self, src: int, dst: int) -> Link:
        """The link a message from ``src`` to ``dst`` uses."""
        same = src // self.workers_per_host == dst // self.workers_per_host
        return self.intra_host if same else self.inter_host

    def post(self, key: Any, src: int, dst: int, nbytes: float, by: int, not_before: float = 0.0) -> Message:
        """Post one end of the message ``key`` (``by`` is ``src`` or ``dst``); returns the message.

        ``not_before``: the time this end really posts it when the worker's clock is ahead of the
        simulation's (a wait and the compute after it are booked as one timeout). The message is matched
        when the second end is posted and starts once both ends' times are reached and its channels allow.
        """
        pending = self._pending.pop(key, None)
        if pending is None:
            msg = Message(self.env, src, dst, nbytes, by, key)
            if not_before:
                msg.ready_at = not_before
            self._pending[key] = msg
            return msg
        if pending.posted_by == by or pending.src != src or pending.dst != dst:
            raise RuntimeError(f"message {key!r} posted twice by worker {by} or with different ends")
        if pending.nbytes != nbytes:
            raise RuntimeError(
                f"message {key!r}: sender and receiver disagree on its size ({pending.nbytes} vs {nbytes} bytes)"
            )
        if not_before > pending.ready_at:
            pending.ready_at = not_before
        self.matched += 1
        self._start(pending)
        return pending

    def _start(self, msg: Message) -> None:
        now = self.env.now
        s, d = msg.src, msg.dst
        wph = self.workers_per_host
        link = self.intra_host if s // wph == d // wph else self.inter_host
        occupancy = link.gap_s + msg.nbytes / link.bandwidth_Bps
        sent = self.send_cal[s].book(max(now, msg.ready_at), occupancy, now)
        received = self.recv_cal[d].book(sent, occupancy, now)
        msg.start, msg.end = sent, received + occupancy
        msg.deliver_at = msg.end + link.latency_s
        if self.trace:
            self.transfers.append(msg)
        if msg.callbacks:  # someone is blocked on it; everyone else reads deliver_at
            msg.deliver_after(msg.deliver_at - now)

    def allreduce(self, key: Any, nbytes: float, at: float = 0.0) -> simpy.Event:
        """Join the all-reduce ``key`` at time ``at``; the event fires a ring all-reduce's time after the
        last worker joined."""
        c = self._collectives.get(key)
        if c is None:
            c = _Collective(0, Message(self.env, -1, -1, nbytes, -1, key), nbytes)
            self._collectives[key] = c
        c.arrived += 1
        c.latest = max(c.latest, at, self.env.now)
        if c.arrived == self.workers:
            del self._collectives[key]
            duration = allreduce_seconds(self.collective_link, c.nbytes, self.workers)
            c.done.deliver_at = c.latest + duration
            c.done.deliver_after(c.done.deliver_at - self.env.now)
        return c.done

    def unmatched(self) -> list[Any]:
        """Keys of messages posted by one end only (a schedule bug if any remain after the epoch)."""
        return list(self._pending) + list(self._collectives)


class ResourceNetwork(Network):
    """:class:`Network` with the NIC channels as ``simpy.Resource`` objects (FIFO in request order)."""

    def _setup_channels(self) -> None:
        self.send_res = [simpy.Resource(self.env, capacity=1) for _ in range(self.workers)]
        self.recv_res = [simpy.Resource(self.env, capacity=1) for _ in range(self.workers)]

    def _start(self, msg: Message) -> None:
        self.env.process(self._transfer(msg))

    def _transfer(self, msg: Message) -> Generator[simpy.Event, Any, None]:
        link = self.link(msg.src, msg.dst)
        occupancy = link.occupancy(msg.nbytes)
        if msg.ready_at > self.env.now:
            yield self.env.timeout(msg.ready_at - self.env.now)
        with self.send_res[msg.src].request() as send:
            yield send
            msg.start = self.env.now
            self.env.process(self._receive(msg, link, occupancy))
            yield self.env.timeout(occupancy)

    def _receive(self, msg: Message, link: Link, occupancy: float) -> Generator[simpy.Event, Any, None]:
        with self.recv_res[msg.dst].request() as recv:
            yield recv
            yield self.env.timeout(occupancy)
            msg.end = self.env.now
        if self.trace:
            self.transfers.append(msg)
        msg.deliver_at = msg.end + link.latency_s
        msg.deliver_after(link.latency_s)


NETWORKS: dict[str, type[Network]] = {"reserve": Network, "simpy": ResourceNetwork}
