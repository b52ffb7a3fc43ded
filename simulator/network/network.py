"""Network and CPU contention for the epoch model: NIC channels, point-to-point messages, all-reduces.

Every host has a full-duplex NIC: one send channel and one receive channel, each a single server, shared by
the workers on it for their messages to other hosts; messages between workers of one host go through the
intra-host link (loopback, shared memory), where every worker has its own pair of channels.

A message from ``src`` to ``dst`` has two ends, the sender's ``isend`` and the receiver's ``irecv``; each end
joins the queue of its channel (the sender's send channel, the receiver's receive channel) when it is posted,
so a channel serves its messages first come, first served in the order they were posted there (a worker's in
its program order). A message goes once both ends are posted and it heads both queues: its bytes stream
cut-through, leaving the send channel at the later of both ends' post times and the moment that channel is
free, entering the receive channel once they have started and it is free; each channel is held for
``g + bytes / B`` (:class:`sarlab.simulator.hardware.profile.Link`; ``g + bytes / (eta B)`` on a
:class:`sarlab.simulator.network.sharing.SharedLink` when one of its channels is still busy once both ends are posted:
concurrent flows on a shaped link lose throughput) and the message is delivered ``L`` after the receive side
ends. The network in between buffers what a busy receiver cannot take yet. Messages that share a channel
queue, which is where contention shows (incast in ``oneshot``'s all-to-all, overlapping prefetched rounds in
``sar``); on a balanced all-to-all every receiver then takes one message per round, as a transport sharing
each link fairly among its flows finishes it. This is the booking of the lockstep executor
(:mod:`sarlab.simulator.system.lockstep`), which books every rank's ``r``-th exchange at once; the two agree exactly.
A NIC shared by several workers (``workers_per_nic > 1``) interleaves their programs, whose orders may
disagree, so its messages are booked in the order both their ends were posted instead (first come, first
served, never an idle channel while a posted message waits).

Two implementations, with the same interface:

* :class:`Network` (default, ``discipline="reserve"``): the queues above; a message's delivery time is known
  when it is booked, so it costs at most one SimPy event (none when nobody is blocked on it).
* :class:`ResourceNetwork` (``discipline="simpy"``): the same servers as ``simpy.Resource`` objects, one
  process per message from the moment both ends are posted (first come, first served in that order, the
  receive request made when the sender starts). Slower; the literal reference the fast one is tested against.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

import simpy
from simpy.events import NORMAL, PENDING

from sarlab.simulator.hardware.profile import Link
from sarlab.simulator.network.collectives import allreduce_seconds
from sarlab.simulator.network.sharing import shared_occupancy


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


class Message(simpy.Event):
    """A point-to-point message; as an event it fires when the message has been delivered.

    The delivery time ``deliver_at`` is known as soon as the message is booked on its channels, and the event
    is only scheduled if a worker is already blocked on it: a worker that arrives later reads ``deliver_at``
    instead of yielding (:meth:`sarlab.simulator.system.clock.WorkerClocks.wait`).

    Args:
        env: the SimPy environment.
        src, dst: sending and receiving worker.
        nbytes: payload.
        posted_by: the worker that posted the first end.
        key: the matching key.
    """

    ready_at = 0.0  # both ends have really posted it (a worker may post ahead of the simulation clock)
    ends = 0  # ends posted (both: 2)
    start = -1.0  # bytes start leaving the sender
    end = -1.0  # bytes have entered the receiver
    deliver_at = -1.0  # delivered (known once booked; -1 before)

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
    """Point-to-point messages and all-reduces between ``workers`` workers placed on hosts (queues per channel).

    Args:
        env: the SimPy environment.
        workers: number of workers ``N``.
        inter_host: link between hosts; intra_host: link inside a host.
        workers_per_nic: placement on NICs (worker ``p`` sends through NIC ``p // workers_per_nic``; workers of
            one NIC talk over the intra-host link).
        trace: keep every message (for the Gantt chart).
    """

    env: simpy.Environment
    workers: int
    inter_host: Link
    intra_host: Link
    workers_per_nic: int
    trace: bool = False
    transfers: list[Message] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.matched = 0
        self._pending: dict[Any, Message] = {}
        self._queues: dict[Any, deque[Message]] = {}  # per channel: messages posted there, not yet booked
        self._free: dict[Any, float] = {}  # per channel: when it has sent what was booked on it
        self._collectives: dict[Any, _Collective] = {}
        self.hosts = -(-self.workers // self.workers_per_nic)
        # All-reduces cross hosts whenever there is more than one host.
        self.collective_link = self.inter_host if self.hosts > 1 else self.intra_host

    def link(self, src: int, dst: int) -> Link:
        """The link a message from ``src`` to ``dst`` uses."""
        same = src // self.workers_per_nic == dst // self.workers_per_nic
        return self.intra_host if same else self.inter_host

    def channels(self, src: int, dst: int) -> tuple[Link, Any, Any]:
        """The link of a message from ``src`` to ``dst`` and the keys of its send and receive channels."""
        hs, hd = src // self.workers_per_nic, dst // self.workers_per_nic
        if hs == hd:
            return self.intra_host, ("worker send", src), ("worker recv", dst)
        return self.inter_host, ("nic send", hs), ("nic recv", hd)

    def _end(self, key: Any, src: int, dst: int, nbytes: float, by: int, not_before: float) -> Message:
        """The message ``key`` with one more end posted (checked against the first end)."""
        msg = self._pending.pop(key, None)
        if msg is None:
            msg = Message(self.env, src, dst, nbytes, by, key)
            self._pending[key] = msg
        elif msg.posted_by == by or msg.src != src or msg.dst != dst:
            raise RuntimeError(f"message {key!r} posted twice by worker {by} or with different ends")
        elif msg.nbytes != nbytes:
            raise RuntimeError(
                f"message {key!r}: sender and receiver disagree on its size ({msg.nbytes} vs {nbytes} bytes)"
            )
        msg.ends += 1
        if not_before > msg.ready_at:
            msg.ready_at = not_before
        if msg.ends == 2:
            self.matched += 1
        return msg

    def post(self, key: Any, src: int, dst: int, nbytes: float, by: int, not_before: float = 0.0) -> Message:
        """Post one end of the message ``key`` (``by`` is ``src`` or ``dst``); returns the message.

        ``not_before``: the time this end really posts it when the worker's clock is ahead of the
        simulation's (a wait and the compute after it are booked as one timeout). The message is booked once
        both ends are posted and it heads the queues of both its channels (the module docstring).
        """
        msg = self._end(key, src, dst, nbytes, by, not_before)
        link, send_key, recv_key = self.channels(src, dst)
        if self.workers_per_nic > 1 and send_key[0] == "nic send":  # a NIC shared by several workers
            if msg.ends == 2:
                self._book(msg, link, send_key, recv_key)
            return msg
        channel = send_key if by == src else recv_key
        queue = self._queues.get(channel)
        if queue is None:
            queue = self._queues[channel] = deque()
        queue.append(msg)
        self._drain(channel)
        return msg

    def _book(self, msg: Message, link: Link, send_key: Any, recv_key: Any) -> None:
        """Book ``msg`` after whatever its channels have booked so far (cut-through, see the module docstring)."""
        free = self._free
        ready, send_free, recv_free = msg.ready_at, free.get(send_key, 0.0), free.get(recv_key, 0.0)
        # a link end still busy when the message is ready: the two flows share it, at a loss
        # (sarlab.simulator.network.sharing)
        occupancy = shared_occupancy(link, msg.nbytes, send_free > ready or recv_free > ready)
        start = max(ready, send_free)
        received = max(start, recv_free)
        free[send_key] = start + occupancy
        free[recv_key] = received + occupancy
        msg.start, msg.end = start, received + occupancy
        msg.deliver_at = msg.end + link.latency_s
        if self.trace:
            self.transfers.append(msg)
        if msg.callbacks:  # someone is blocked on it; everyone else reads deliver_at
            msg.deliver_after(max(msg.deliver_at - self.env.now, 0.0))

    def _drain(self, channel: Any) -> None:
        """Book the messages at the head of ``channel``'s queue that head their other channel's queue too."""
        todo = [channel]
        queues = self._queues
        while todo:
            queue = queues.get(todo.pop())
            while queue:
                msg = queue[0]
                if msg.ends < 2:
                    break
                link, send_key, recv_key = self.channels(msg.src, msg.dst)
                sq, rq = queues[send_key], queues[recv_key]
                if sq[0] is not msg or rq[0] is not msg:
                    break
                sq.popleft()
                rq.popleft()
                self._book(msg, link, send_key, recv_key)
                todo.append(recv_key if queue is sq else send_key)

    def allreduce(self, key: Any, nbytes: float, at: float = 0.0, duration: float | None = None) -> simpy.Event:
        """Join the all-reduce ``key`` at time ``at``; the event fires a ring all-reduce's time (or
        ``duration``) after the last worker joined."""
        c = self._collectives.get(key)
        if c is None:
            c = _Collective(0, Message(self.env, -1, -1, nbytes, -1, key), nbytes)
            self._collectives[key] = c
        c.arrived += 1
        c.latest = max(c.latest, at, self.env.now)
        if c.arrived == self.workers:
            del self._collectives[key]
            if duration is None:
                duration = allreduce_seconds(self.collective_link, c.nbytes, self.workers)
            c.done.deliver_at = c.latest + duration
            c.done.deliver_after(c.done.deliver_at - self.env.now)
        return c.done

    def unmatched(self) -> list[Any]:
        """Keys of messages posted by one end only or never booked (a schedule bug if any remain after the
        epoch)."""
        queued = [m.key for q in self._queues.values() for m in q]
        return list(self._pending) + list(self._collectives) + queued


class ResourceNetwork(Network):
    """:class:`Network` with the NIC channels as ``simpy.Resource`` objects: a message requests its send
    channel once both ends are posted, its receive channel once it starts (first come, first served)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._resources: dict[Any, simpy.Resource] = {}

    def _resource(self, channel: Any) -> simpy.Resource:
        res = self._resources.get(channel)
        if res is None:
            res = self._resources[channel] = simpy.Resource(self.env, capacity=1)
        return res

    def post(self, key: Any, src: int, dst: int, nbytes: float, by: int, not_before: float = 0.0) -> Message:
        msg = self._end(key, src, dst, nbytes, by, not_before)
        if msg.ends == 2:
            self.env.process(self._transfer(msg))
        return msg

    def _transfer(self, msg: Message) -> Generator[simpy.Event, Any, None]:
        link, send_key, recv_key = self.channels(msg.src, msg.dst)
        if msg.ready_at > self.env.now:
            yield self.env.timeout(msg.ready_at - self.env.now)
        send_res, recv_res = self._resource(send_key), self._resource(recv_key)
        busy = any(res.count or res.queue for res in (send_res, recv_res))
        occupancy = shared_occupancy(link, msg.nbytes, busy)
        with send_res.request() as send:
            yield send
            msg.start = self.env.now
            self.env.process(self._receive(msg, link, occupancy, recv_res))
            yield self.env.timeout(occupancy)

    def _receive(self, msg: Message, link: Link, occupancy: float,
                 recv_res: simpy.Resource) -> Generator[simpy.Event, Any, None]:
        with recv_res.request() as recv:
            yield recv
            yield self.env.timeout(occupancy)
            msg.end = self.env.now
        if self.trace:
            self.transfers.append(msg)
        msg.deliver_at = msg.end + link.latency_s
        msg.deliver_after(link.latency_s)


NETWORKS: dict[str, type[Network]] = {"reserve": Network, "simpy": ResourceNetwork}
