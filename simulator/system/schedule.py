"""The schedule: what each worker does, in the engine's order, as one SimPy process per worker.

A worker runs what the engine's ``Trainer.forward_backward`` + optimizer step run: for every layer the dense
``pre`` work, the aggregation with its exchanges, the dense ``post`` work and the hidden-layer tail
(BatchNorm with its two fp64 all-reduces, ReLU, dropout); the loss; the backward pass in reverse layer order
(BatchNorm's all-reduce, the aggregation's gradient exchanges); the gradient and loss all-reduces; Adam.
The exchanges follow ``sarlab/core/aggregate.py`` (worker ``p``, prefetch ``d``, round ``r = 1..N-1``,
``q_in = p - r``, ``q_out = p + r`` mod ``N``):

* ``sar``/``sa`` forward: rounds ``1..d+1`` are posted first (rows gathered, send to ``q_out`` + receive
  from ``q_in``), so they overlap the local shard, which is aggregated next; then round ``r`` is waited for
  (both messages), aggregated, its rows dropped (``sar``) and the next unposted round posted: while round
  ``r`` is computed rounds ``r+1..r+d`` are in flight, so ``sar`` holds at most ``d + 1`` fetched shards.
* backward, case 1 (sum/mean of copied rows): the remote gradients ``A_q^T g`` are computed and sent back
  to ``q_in`` first (the gradient of this worker's rows comes from ``q_out``), then the local shard's
  gradient overlaps them; once more than ``d + 1`` are in flight the oldest is waited for and added in.
  Case 2: ``sar`` starts the re-fetch, computes the local shard's VJP while it is in flight, then per
  round the VJP and its gradient return; ``sa`` uses its kept rows (unfused GAT: one autograd backward
  over the kept graph, then all returns).
* ``oneshot``: all ``N - 1`` exchanges are posted at once into an extended ``[own; halo]`` matrix, then
  one aggregation; its backward sends every halo gradient at once.

Memory: every tensor the engine allocates is booked on the worker's
:class:`sarlab.simulator.system.memory.MemoryTracker` when it is made and freed when it dies (sizes from
:mod:`sarlab.simulator.workload.layer_memory`): ``sar`` frees each fetched shard (and its send buffer) when the
next round is taken, as ``RingFetch``'s ``Pending`` holds both until then; ``sa`` keeps all of them until the
layer's backward; ``oneshot`` holds all halo rows at once, kept for backward only in case 2. Linear
aggregations keep no exchanged rows for backward in any mode. Seconds and bytes are looked up in
:mod:`sarlab.simulator.system.pricing`; time moves by :mod:`sarlab.simulator.system.clock`.

Message software costs: an exchange call costs ``p2p_call_s`` plus ``p2p_op_s`` per op it posts (a ring
round's isend and irecv, ``oneshot``'s ``2 (N-1)``; empty messages post nothing), its waits ``p2p_wait_s``
per op, booked with the compute that follows the wait; each call may be delayed by its per-round jitter.
``RunSpec(round_sync="global")`` runs the rounds as the SAR paper's library does (every round one
``all_to_all`` of all workers): ``2 (N-1)`` ops per round, and a round's messages arrive only once every
worker has joined it (:meth:`sarlab.simulator.system.clock.WorkerClocks.round_sync`).

The same code runs one worker per SimPy process (:mod:`sarlab.simulator.system.epoch`) or all workers at once as arrays
(:mod:`sarlab.simulator.system.lockstep`): it indexes tables ``T[p][q]`` and keeps per-worker state under ``w.key``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from functools import reduce

import numpy as np

from sarlab.simulator.network.network import Message
from sarlab.simulator.system.clock import Proc, Worker, WorkerClocks
from sarlab.simulator.system.pricing import EpochPricing, LayerTables
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.workload.ops import FP64


class Schedule:
    """The engine's order of work and exchanges for one epoch run.

    Args:
        pricing: the configuration's pricing tables.
        clock: the run's clock primitives.
        run: mode and prefetch depth.
    """

    def __init__(self, pricing: EpochPricing, clock: WorkerClocks, run: RunSpec) -> None:
        self.pricing, self.clock, self.run_spec = pricing, clock, run
        self.N, self.ring, self.tables = pricing.N, pricing.ring, pricing.layers
        self.b, self.params = pricing.b, pricing.params
        prof = pricing.profile
        self.p2p_call_s, self.op_s, self.wait_s = prof.p2p_call_s, prof.p2p_op_s, prof.p2p_wait_s
        self.global_rounds = run.round_sync == "global"
        self.kept: dict[tuple[int, int], dict[int, float]] = {}  # sa's resident rows per (rank, layer)

    def worker(self, w: Worker) -> Proc:
        """The SimPy process of worker ``w``: forward through the layers, loss, backward in reverse, the
        gradient and loss all-reduces, Adam."""
        p, mem, b = w.rank, w.mem, self.b
        for A in self.tables:
            yield from self._forward_layer(w, A)
        mem.alloc(self.pricing.loss_saved[p])
        yield from self.clock.compute(w, self.pricing.loss_f[p], ("loss", "fwd"))
        mem.alloc(self.pricing.logits_grad[p])
        yield from self.clock.compute(w, self.pricing.loss_b[p], ("loss", "bwd"))
        mem.free(self.pricing.loss_saved[p])
        for li in range(len(self.tables) - 1, -1, -1):
            yield from self._backward_layer(w, li)
            if li == len(self.tables) - 1:
                mem.free(self.pricing.logits_grad[p])
        mem.alloc(self.params * b)  # torch.cat of the gradients
        yield from self.clock.compute(w, self.pricing.flat_s, ("flatten",))
        yield from self.clock.allreduce(w, self.params * b, ("grad",))
        yield from self.clock.allreduce(w, FP64, ("loss",))
        mem.free(self.params * b)  # the per-parameter gradient list dies with forward_backward
        mem.alloc(self.params * b)  # Adam's temporary denominator
        yield from self.clock.compute(w, self.pricing.opt_s, ("adam",))
        mem.free(2 * self.params * b + self.tables[-1].mem[p].conv_out)  # flat grads, denominator, logits

    def _forward_layer(self, w: Worker, A: LayerTables) -> Proc:
        p, mem = w.rank, w.mem
        L, M, li = A.plan, A.mem[p], A.plan.index
        ring = self.ring
        mem.alloc(M.pre_peak + M.exchange + M.pre_saved)
        yield from self.clock.compute(w, A.pre_f[p], (li, "pre"))
        mem.free(M.pre_peak)
        if ring:
            yield from self._ring_forward(w, A)
        else:
            yield from self._oneshot_forward(w, A)
        mem.alloc(M.post_peak + M.conv_out)
        yield from self.clock.compute(w, A.post_f[p], (li, "post"))
        mem.free(M.post_peak)
        if not (L.records or M.agg_out_kept):
            mem.free(M.agg_out)
        if not (M.exchange_kept or self._rows_saved(L)):
            mem.free(M.exchange)
        if not L.hidden:
            return
        stats, var, rest = A.tail_f[0][p], A.tail_f[1][p], A.tail_f[2][p]
        f = L.out_dim
        if L.batchnorm:
            mem.alloc(M.bn_peak)
            yield from self.clock.compute(w, stats, (li, "bn"))
            yield from self.clock.allreduce(w, (f + 1) * FP64, (li, "bn-mean"))
            yield from self.clock.compute(w, var, (li, "bn"))
            yield from self.clock.allreduce(w, f * FP64, (li, "bn-var"))
            mem.alloc(M.bn_saved + M.conv_out)  # xhat, and y = xhat * weight + bias
            mem.free(M.bn_peak + M.conv_out)  # BatchNorm does not keep its input
        mem.alloc(M.relu_saved)
        mem.free(M.conv_out)  # ReLU's input (the conv output, or BatchNorm's output)
        if L.dropout > 0:
            mem.alloc(M.dropout_peak)
            mem.alloc(M.dropout_saved + M.next_input)
            mem.free(M.dropout_peak)
        yield from self.clock.compute(w, rest, (li, "tail"))

    def _backward_layer(self, w: Worker, li: int) -> Proc:
        p, mem = w.rank, w.mem
        A = self.tables[li]
        L, M = A.plan, A.mem[p]
        mem.alloc(M.grad_tail)
        if L.hidden:
            yield from self.clock.compute(w, A.tail_b[0][p], (li, "tail-bwd"))
            if L.batchnorm:
                yield from self.clock.allreduce(w, 2 * L.out_dim * FP64, (li, "bn-bwd"))
                yield from self.clock.compute(w, A.tail_b[1][p], (li, "bn-bwd"))
            mem.free(M.dropout_saved + M.relu_saved + M.bn_saved)
        mem.free(M.grad_tail)
        mem.alloc(M.grad_post)
        yield from self.clock.compute(w, A.post_b[p], (li, "post-bwd"))
        mem.free(M.grad_post)
        mem.alloc(M.grad_agg)
        if L.records:
            if not self.ring:
                yield from self._oneshot_backward(w, A)
            else:
                yield from self._ring_backward(w, A)
        if L.records or M.agg_out_kept:
            mem.free(M.agg_out)
        if M.exchange_kept or self._rows_saved(L):
            mem.free(M.exchange)
        mem.free(M.grad_agg)
        mem.alloc(M.grad_pre)
        yield from self.clock.compute(w, A.pre_b[p], (li, "pre-bwd"))
        mem.free(M.pre_saved + M.grad_pre)
        mem.alloc(L.params * self.b)  # this layer's parameter gradients, kept until the step
        if li > 0:
            mem.free(self.tables[li - 1].mem[p].next_input)  # this layer's input is no longer needed

    def _rows_saved(self, L) -> bool:
        """Whether the aggregation saves the exchanged rows for its backward: a non-linear one with an autograd
        record (case 2) saves its input in the ring modes (``SequentialAggregate``) and on one worker (the local
        shard's ``ShardAggregate``); ``oneshot`` on several workers saves ``[own; halo]`` (``one_ext``) instead,
        and the rows die with the layer's forward."""
        return bool(L.records and L.case == 2 and (self.ring or self.N == 1))

    # --------------------------------------------------------------------------- ring modes
    def _ring_fetch(
        self,
        w: Worker,
        A: LayerTables,
        phase: str,
        local: Callable[[], Proc],
        kept: dict[int, float] | None,
        returns: deque | None,
    ) -> Proc:
        """The engine's ``RingFetch`` + per-round work, forward (aggregate) or backward (re-fetch + VJP).

        ``start()`` posts rounds ``1..d+1`` (rows gathered, exchange posted), then ``local()`` runs (the
        local shard, overlapping those fetches); then per round: wait for both messages, aggregate (or VJP)
        the round, post the next unposted round. While round ``r`` is computed rounds ``r+1..r+d`` are in
        flight: at most ``d + 1`` remote shards are resident.

        A round's send buffer and received rows die when the next round is taken (or the rounds end), not at
        its wait: ``RingFetch`` keeps the round's ``Pending``, whose gloo work objects hold both tensors, until
        it takes the next one, so the round's buffers are alive through its compute and the next round's post.

        ``kept``: ``sa``'s resident rows (round -> bytes), filled in forward. ``returns``: backward; each
        round's gradient goes to :meth:`_grad_return` (the caller drains what is left in flight). A backward
        round's VJP makes the row gradient, the send buffer, beside its temporaries; in case 2 the engine's round
        loop keeps a VJP's destination-input gradient (:attr:`LayerMemory.shard_grad_dst`) until the next
        round's VJP has returned its own (the caller frees it when the aggregation backward ends).
        """
        backward = returns is not None
        N, d, p, mem, li = self.N, self.run_spec.prefetch, w.rank, w.mem, A.plan.index
        rows, gather = A.row_bytes, A.gather
        compute_table = A.shard_b if backward else A.shard_f
        transient_table = A.shard_bwd_transient if backward else A.shard_transient
        in_flight: deque[tuple[int, tuple[Message, ...], float, float]] = deque()
        next_round = 1
        fast, tick, op_s, wait_s = self.clock.pools is None, self.clock.tick, self.op_s, self.wait_s

        def post(r: int) -> Proc:
            """Gather round ``r``'s rows and post its exchange (the gather and the call are compute)."""
            q_out = (p + r) % N
            send_b, recv_b = rows[q_out][p], rows[p][(p - r) % N]
            ops = self._ops(send_b, recv_b)
            mem.alloc(send_b + recv_b)
            if fast:
                tick(w, gather[p][q_out] + op_s * ops, (li, "gather", r))
                ev = self.clock.catch_up(w)
                if ev is not None:
                    yield ev
            else:
                yield from self.clock.compute(w, gather[p][q_out] + op_s * ops, (li, "gather", r))
                yield from self.clock.sync(w)
            self.clock.jitter(w)
            msgs = self.clock.exchange(w, phase, li, r, send_b, recv_b, w.clock)
            if self.global_rounds:
                msgs = (*msgs, self.clock.round_sync(w, (li, phase, r), w.clock))
            in_flight.append((r, msgs, send_b, ops))

        while next_round < N and len(in_flight) <= d:
            yield from post(next_round)
            next_round += 1
        yield from local()
        previous = 0.0  # the buffers of the round taken last, held by its Pending until the next one is taken
        dst_grad = A.mem[p].shard_grad_dst if backward else 0.0
        while in_flight:
            r, msgs, send_b, ops = in_flight.popleft()
            mem.free(previous)
            if not self.clock.arrive_all(w, msgs, (li, phase, r)):  # all booked: no need to block
                yield from self.clock.wait(w, msgs, (li, phase, r))
            q = (p - r) % N
            # backward: the row gradient (the send buffer) is made beside the VJP's temporaries
            grad_rows = rows[p][q] if backward else 0.0
            transient = transient_table[p][q]
            mem.alloc(transient + grad_rows)
            seconds = compute_table[p][q] + wait_s * ops
            if fast:
                tick(w, seconds, (li, "agg-bwd" if backward else "agg", r))
            else:
                yield from self.clock.compute(w, seconds, (li, "agg-bwd" if backward else "agg", r))
            mem.free(transient)
            if backward and r == 1:
                mem.alloc(dst_grad)  # kept by the round loop from here on (one at a time, beside the next VJP's)
            if kept is not None:
                kept[r] = rows[p][q]
                mem.alloc(A.shard_kept[p][q])
            if returns is not None:
                yield from self._grad_return(w, A, r, returns, send="given")
            previous = send_b + (rows[p][q] if kept is None else 0.0)
            if next_round < N:
                yield from post(next_round)
                next_round += 1
        mem.free(previous)

    def _ops(self, send_b, recv_b):
        """Message ops one round's exchange call posts: its non-empty isend and irecv (an int array for all
        ranks at once), or, with global rounds, ``2 (N-1)``: a tensor to and from every peer."""
        if self.global_rounds:
            return 2 * (self.N - 1)
        return 1 * (send_b > 0) + (recv_b > 0)

    def _grad_return(
        self, w: Worker, A: LayerTables, r: int, returns: deque, send: str = "new"
    ) -> Proc:
        """The engine's ``GradReturn.post``: send round ``r``'s source gradient home; once more than
        ``d + 1`` are in flight the oldest is waited for and added in.

        ``send``: the gradient rows (the send buffer) are ``new`` (booked here, freed with the round),
        ``given`` (booked by the caller, freed with the round) or ``kept`` (booked and freed by the caller).
        """
        N, p, li = self.N, w.rank, A.plan.index
        q_in, q_out = (p - r) % N, (p + r) % N
        send_b, recv_b = A.row_bytes[p][q_in], A.row_bytes[q_out][p]
        w.mem.alloc(recv_b + (send_b if send == "new" else 0.0))
        booked = recv_b + (0.0 if send == "kept" else send_b)  # freed when the round completes
        ops = self._ops(send_b, recv_b)
        if self.clock.pools is None:
            self.clock.tick(w, self.p2p_call_s + self.op_s * ops, (li, "post", r))
            ev = self.clock.catch_up(w)
            if ev is not None:
                yield ev
        else:
            yield from self.clock.compute(w, self.p2p_call_s + self.op_s * ops, (li, "post", r))
            yield from self.clock.sync(w)
        self.clock.jitter(w)
        msgs = self.clock.exchange(w, "g", li, N - r, send_b, recv_b, w.clock)
        if self.global_rounds:
            msgs = (*msgs, self.clock.round_sync(w, (li, "g", r), w.clock))
        returns.append((r, msgs, booked, q_out, ops))
        while len(returns) > self.run_spec.prefetch + 1:
            yield from self._grad_complete(w, A, returns)

    def _grad_complete(self, w: Worker, A: LayerTables, returns: deque) -> Proc:
        r, msgs, nbytes, q_out, ops = returns.popleft()
        li = A.plan.index
        if not self.clock.arrive_all(w, msgs, (li, "grad", r)):
            yield from self.clock.wait(w, msgs, (li, "grad", r))
        seconds = A.accumulate[w.rank][q_out] + self.wait_s * ops
        if self.clock.pools is None:
            self.clock.tick(w, seconds, (li, "accumulate", r))
        else:
            yield from self.clock.compute(w, seconds, (li, "accumulate", r))
        w.mem.free(nbytes)

    def _ring_forward(self, w: Worker, A: LayerTables) -> Proc:
        p, mem = w.rank, w.mem
        M, li = A.mem[p], A.plan.index
        keep = self.run_spec.mode == "sa"

        def local() -> Proc:  # init + the local shard, while the first rounds are in flight
            mem.alloc(M.agg_state)
            transient = A.shard_transient[p][p]
            mem.alloc(transient)
            yield from self.clock.compute(w, A.init_f[p] + A.shard_f[p][p], (li, "agg", 0))
            mem.free(transient)
            if keep and A.plan.records:
                mem.alloc(A.shard_kept[p][p])

        kept: dict[int, float] | None = {} if keep else None
        yield from self._ring_fetch(w, A, "f", local, kept, None)
        mem.alloc(A.finalize_transient[p])
        yield from self.clock.compute(w, A.finalize[p], (li, "finalize"))
        if M.new_out:
            mem.alloc(M.agg_out)
            mem.free(M.agg_state)
        mem.free(A.finalize_transient[p])
        if kept is not None:
            if A.plan.records:
                self.kept[(w.key, li)] = kept
            else:  # no autograd record: sa's kept rows die with the forward
                mem.free(sum(kept.values()))

    def _ring_backward(self, w: Worker, A: LayerTables) -> Proc:
        N, p, mem = self.N, w.rank, w.mem
        L, M, li, mode = A.plan, A.mem[p], A.plan.index, self.run_spec.mode
        kept = self.kept.pop((w.key, li), None) if mode == "sa" else None
        own = A.own_rows[p]
        extra = M.agg_bwd_hold  # SAGE-mean's scaled gradient, GAT's destination-input gradient
        mem.alloc(own + extra)  # zeroed source gradient (+ the above)
        yield from self.clock.compute(w, A.bwd_setup[p], (li, "bwd-setup"))

        def local() -> Proc:  # the local shard's VJP, added into the source gradient (case 1: in place), then
            # the self-loop terms' VJP (GAT)
            transient = A.shard_bwd_transient[p][p]
            mem.alloc(transient)
            yield from self.clock.compute(w, A.shard_b[p][p] + A.self_b[p], (li, "agg-bwd", 0))
            mem.free(transient)
            if kept is not None:
                mem.free(A.shard_kept[p][p])

        returns: deque = deque()
        if L.case == 1:  # remote gradients A_q^T g go out first, then the local shard overlaps them
            if kept is not None:  # sa keeps rows it never needs in case 1: dropped at once
                mem.free(sum(kept.values()))
            for r in range(1, N):
                q = (p - r) % N
                transient = A.shard_bwd_transient[p][q]
                mem.alloc(A.row_bytes[p][q] + transient)  # A_q^T g (the send buffer) and its temporaries
                if self.clock.pools is None:
                    self.clock.tick(w, A.shard_b[p][q], (li, "agg-bwd", r))
                else:
                    yield from self.clock.compute(w, A.shard_b[p][q], (li, "agg-bwd", r))
                mem.free(transient)
                yield from self._grad_return(w, A, r, returns, send="given")
            yield from local()
        elif kept is None:  # sar, case 2: re-fetch (overlapping the local shard), rematerialize, return
            yield from self._ring_fetch(w, A, "r", local, None, returns)
        elif L.whole_graph_backward(mode):  # sa keeping the autograd graph: one backward, then the returns
            shards = [(p - r) % N for r in range(N)]  # the local shard and every remote one
            # one autograd backward over the kept graph: all of it is alive while the largest shard's
            # gradients are (measured: the graph is released when the backward ends)
            transient = reduce(np.maximum, (A.shard_bwd_transient[p][q] for q in shards))
            mem.alloc(transient)
            seconds = sum(A.shard_b[p][q] for q in shards) + A.self_b[p]  # init's graph (self loops) is in it
            yield from self.clock.compute(w, seconds, (li, "agg-bwd"))
            mem.free(transient)
            grads = sum(A.row_bytes[p][q] for q in shards[1:])
            mem.alloc(grads)
            mem.free(sum(kept.values()) + sum(A.shard_kept[p][q] for q in shards))
            for r in range(1, N):
                yield from self._grad_return(w, A, r, returns, send="kept")
            while returns:
                yield from self._grad_complete(w, A, returns)
            mem.free(grads)
        else:  # sa, case 2: the kept rows (the VJP makes the row gradient beside its temporaries, as sar's)
            yield from local()
            for r in range(1, N):
                q = (p - r) % N
                transient = A.shard_bwd_transient[p][q]
                mem.alloc(transient + A.row_bytes[p][q])
                yield from self.clock.compute(w, A.shard_b[p][q], (li, "agg-bwd", r))
                mem.free(transient + kept.pop(r) + A.shard_kept[p][q])
                if r == 1:
                    mem.alloc(M.shard_grad_dst)  # kept by the round loop, as in _ring_fetch
                yield from self._grad_return(w, A, r, returns, send="given")
        while returns:
            yield from self._grad_complete(w, A, returns)
        # case 2's round loop held the last VJP's destination gradient until here (N > 1: ring modes only)
        held = M.shard_grad_dst if L.case == 2 and not L.whole_graph_backward(mode) else 0.0
        mem.free(own + extra + held)

    # ------------------------------------------------------------------------------ oneshot
    def _batch(self, w: Worker, phase: str, li: int, exchanges: list) -> list[Message]:
        """Post one all-to-all batch ``[(r, send bytes, receive bytes), ...]`` at the worker's clock; its
        messages take each channel in round order, so that on a balanced all-to-all every receiver takes one
        message per round, as a transport sharing each link fairly among its flows finishes it."""
        posted: list[Message] = []
        for r, send_b, recv_b in exchanges:
            posted.extend(self.clock.exchange(w, phase, li, r, send_b, recv_b, w.clock))
        return posted

    def _oneshot_forward(self, w: Worker, A: LayerTables) -> Proc:
        N, p, mem = self.N, w.rank, w.mem
        L, M, li, rows = A.plan, A.mem[p], A.plan.index, A.row_bytes
        mem.alloc(A.one_ext[p])
        sends = sum(rows[(p + r) % N][p] for r in range(1, N))
        mem.alloc(sends)
        ops = A.one_ops[p]
        # every row gathered, then one batch of every op
        yield from self.clock.compute(w, A.one_prep[p] + self.op_s * ops, (li, "gather"))
        yield from self.clock.sync(w)
        self.clock.jitter(w)
        posted = self._batch(w, "f", li, [(r, rows[(p + r) % N][p], rows[p][(p - r) % N]) for r in range(1, N)])
        yield from self.clock.wait(w, tuple(posted), (li, "halo", 0))
        mem.free(sends)
        # max has no shard temporaries and the others no finalize temporaries: booked together, they are the peak
        mem.alloc(M.agg_state + A.one_transient[p] + A.finalize_transient[p])
        seconds = A.init_f[p] + A.one_f[p] + A.finalize[p] + self.wait_s * ops
        yield from self.clock.compute(w, seconds, (li, "agg", 0))
        mem.free(A.one_transient[p])
        if M.new_out:
            mem.alloc(M.agg_out)
            mem.free(M.agg_state)
        mem.free(A.finalize_transient[p])
        if L.records:
            mem.alloc(A.one_kept[p])  # unfused GAT's autograd graph
        if not (L.records and L.case == 2 and not L.autograd):  # ShardAggregate keeps non-linear rows
            mem.free(A.one_ext[p])

    def _oneshot_backward(self, w: Worker, A: LayerTables) -> Proc:
        """Gradient w.r.t. ``[own; halo]`` rows, then (``N > 1``, rows that need a gradient) the halo gradients go
        home at once."""
        N, p, mem = self.N, w.rank, w.mem
        L, li, rows = A.plan, A.plan.index, A.row_bytes
        transient = A.one_bwd_transient[p]
        grad = A.one_grad[p]
        mem.alloc(grad + transient)
        yield from self.clock.compute(w, A.one_b[p] + A.self_b[p], (li, "agg-bwd", 0))  # + GAT's self loops
        mem.free(transient + A.one_kept[p])
        if L.case == 2 and not L.autograd:
            mem.free(A.one_ext[p])
        if N == 1 or not L.rows_need_grad:  # no halo gradients to return (LayerPlan.rows_need_grad)
            mem.free(grad)
            return
        own = A.own_rows[p]
        recvs = sum(rows[(p + r) % N][p] for r in range(1, N))
        mem.alloc(own + recvs)  # grad_ext[:n].clone() and the receive buffers
        ops = A.one_ops[p]
        yield from self.clock.compute(w, A.one_clone[p] + self.p2p_call_s + self.op_s * ops, (li, "clone"))
        yield from self.clock.sync(w)
        self.clock.jitter(w)
        posted = self._batch(w, "g", li, [(N - r, rows[p][(p - r) % N], rows[(p + r) % N][p]) for r in range(1, N)])
        yield from self.clock.wait(w, tuple(posted), (li, "halo-grad", 0))
        yield from self.clock.compute(w, A.one_accumulate[p] + self.wait_s * ops, (li, "accumulate", 0))
        mem.free(grad + recvs + own)
