"""The three aggregation modes as autograd Functions: ``sar``, ``sa`` and ``oneshot``.

* ``sar``: the local shard, then ring rounds ``r = 1..N-1`` fetching the rows of peer ``rank - r``
  (``prefetch`` rounds ahead), aggregated with autograd off and freed at once. Backward: case 1
  (linear aggregators) computes each remote shard's gradient ``A_q^T g`` locally and sends it to its
  owner; case 2 re-fetches each shard, rematerializes its contribution and sends the gradient back.
* ``sa``: the same rounds, but every fetched shard stays resident until backward (no re-fetch).
* ``oneshot``: one exchange of all halo rows with every peer, then one aggregation over
  ``[own rows; halo rows]``; backward sends all halo gradients back in one exchange.

Every Function returns parameter and input gradients through autograd (no writes into ``.grad``).
Source rows (``graph.num_src``, what peers fetch) and destination rows (``graph.num_nodes``, one output each)
are the same rows on a whole graph and differ on a pruned view (:mod:`sarlab.strategies.mfg`).
All workers post the same exchanges in the same order; every exchange completes before a Function
returns, so consecutive layers never mix messages.

Each phase runs under a :mod:`sarlab.core.phases` tag (``aggregation``, ``remote_rows``, ``halo_exchange``,
``aggregation_backward``, ``rematerialization``, ``gradient_return``), so memory profiles attribute the
bytes it allocates by the tag, not by the functions' names.
"""
from __future__ import annotations

from collections import deque
from typing import NamedTuple

import torch

from sarlab.core import phases
from sarlab.core.comm import TAG_FEATURES, TAG_GRADS, TAG_HALO, TAG_HALO_GRADS, Pending


def _ring_peers(graph, ring_round: int) -> tuple[int, int]:
    """(peer I send to, peer I receive from) in ring round ``ring_round``."""
    return (graph.rank + ring_round) % graph.world, (graph.rank - ring_round) % graph.world


class FetchInFlight(NamedTuple):
    """A posted ring round: ``owner``'s rows arrive in ``received`` once ``pending`` completes.

    ``sent`` (the gather of my rows for the peer I send to) is held until then.
    """

    ring_round: int
    owner: int
    received: torch.Tensor
    pending: Pending
    sent: torch.Tensor


class GradientsInFlight(NamedTuple):
    """A posted gradient return: gradients of my ``rows`` arrive in ``received`` once ``pending``
    completes; ``sent`` (the gradients I return to their owner) is held until then."""

    pending: Pending
    rows: torch.Tensor
    received: torch.Tensor
    sent: torch.Tensor


class RingFetch:
    """Rounds 1..N-1 of the ring: the rows of peer ``rank - r`` that this worker needs.

    ``start()`` posts round 1 and the ``prefetch`` rounds after it, so the fetches overlap whatever the
    caller computes next (the local shard). Iterating yields ``(round, owner, rows)``; while the caller
    works on round ``r``, rounds ``r+1 .. r+prefetch`` are in flight, so at most ``1 + prefetch`` remote
    shards are resident. A yielded buffer is released as soon as the caller drops it.
    """

    def __init__(self, graph, src_x: torch.Tensor, prefetch: int):
        self.graph, self.src_x, self.prefetch = graph, src_x, prefetch
        self.in_flight: deque[FetchInFlight] = deque()
        self.next_round = 1

    @phases.tagged("remote_rows")
    def _post(self) -> None:
        graph, ring_round = self.graph, self.next_round
        to_peer, from_peer = _ring_peers(graph, ring_round)
        sent = self.src_x[graph.index.send_rows[to_peer]]
        received = torch.empty((graph.index.recv_counts[from_peer], *self.src_x.shape[1:]), dtype=self.src_x.dtype)
        pending = graph.comm.exchange([(to_peer, sent)], [(from_peer, received)], TAG_FEATURES)
        self.in_flight.append(FetchInFlight(ring_round, from_peer, received, pending, sent))
        self.next_round += 1

    def start(self) -> RingFetch:
        while self.next_round < self.graph.world and len(self.in_flight) <= self.prefetch:
            self._post()
        return self

    def __iter__(self):
        self.start()
        while self.in_flight:
            ring_round, owner, received, pending, sent = self.in_flight.popleft()
            pending.wait()
            del sent
            yield ring_round, owner, received
            del received
            if self.next_round < self.graph.world:
                self._post()


@phases.tagged("remote_rows")
def ring_fetch(graph, src_x: torch.Tensor, prefetch: int) -> RingFetch:
    """Started :class:`RingFetch` (its first rounds are already posted)."""
    return RingFetch(graph, src_x, prefetch).start()


class GradReturn:
    """Send each remote shard's source gradient to its owner; add what peers send back into ``grad_src``.

    At most ``window`` rounds are in flight; ``finish`` drains the rest.
    """

    def __init__(self, graph, grad_src: torch.Tensor, window: int):
        self.graph, self.grad_src, self.window = graph, grad_src, max(window, 0)
        self.in_flight: deque[GradientsInFlight] = deque()

    @phases.tagged("gradient_return")
    def post(self, ring_round: int, grad_rows: torch.Tensor) -> None:
        # the peer that fetched my rows in this round (rank + r) sends their gradients back to me; the
        # gradients of the rows I fetched go to their owner (rank - r)
        from_peer, owner = _ring_peers(self.graph, ring_round)
        rows = self.graph.index.send_rows[from_peer]
        received = torch.empty((rows.numel(), *self.grad_src.shape[1:]), dtype=self.grad_src.dtype)
        sent = grad_rows.contiguous()
        pending = self.graph.comm.exchange([(owner, sent)], [(from_peer, received)], TAG_GRADS)
        self.in_flight.append(GradientsInFlight(pending, rows, received, sent))
        while len(self.in_flight) > self.window:
            self._complete()

    @phases.tagged("gradient_return")
    def _complete(self) -> None:
        done = self.in_flight.popleft()
        done.pending.wait()
        self.grad_src.index_add_(0, done.rows, done.received)

    def finish(self) -> None:
        while self.in_flight:
            self._complete()


def _needs_output(agg) -> bool:
    """Whether an aggregator's backward reads the aggregation's output (saved for it; default yes)."""
    return getattr(agg, "needs_output", True)


def _zeros_or_none(t):
    return None if t is None else torch.zeros_like(t)


def _add_into(grad_dst, grad_params, shard_grad_dst, shard_grad_params) -> None:
    """Add one shard's destination and parameter gradients into the running totals."""
    if shard_grad_dst is not None and grad_dst is not None:
        grad_dst += shard_grad_dst
    for total, part in zip(grad_params, shard_grad_params):
        total += part


def _self_vjp(agg, graph, saved, out, dst_x, grad_out, grad_dst) -> None:
    """Add the gradient of terms an aggregator puts into its initial state (e.g. GAT self-loops)."""
    hook = getattr(agg, "self_vjp", None)
    if hook is not None and dst_x is not None:
        self_grad = hook(graph, saved, out, dst_x, grad_out)
        if self_grad is not None:
            grad_dst += self_grad


@phases.tagged("aggregation")
def autograd_aggregate(agg, graph, shard, src_x, dst_x, params):
    """Plain differentiable aggregation over one shard (autograd keeps whatever it needs)."""
    state = agg.init(shard.num_dst, src_x, dst_x, params, shard)
    state = agg.accumulate(state, shard, src_x, dst_x, params)
    return agg.finalize(graph, state, dst_x, params)[0]


class SequentialAggregate(torch.autograd.Function):
    """``sar`` (``keep=False``) and ``sa`` (``keep=True``) aggregation over the ring of shards.

    With ``keep`` and an aggregator that ``keeps_graph``, the forward builds the autograd graph of every
    shard's accumulation and keeps it (with the fetched rows) until backward.
    """

    @staticmethod
    @phases.tagged("aggregation")
    def forward(ctx, graph, agg, keep: bool, src_x, dst_x, *params):
        ctx.graph, ctx.agg, ctx.has_dst = graph, agg, dst_x is not None
        if keep and getattr(agg, "keeps_graph", False):
            return SequentialAggregate._forward_keeping_graph(ctx, graph, agg, src_x, dst_x, params)
        ctx.graph_leaves = None
        fetch = ring_fetch(graph, src_x, graph.config.prefetch)  # first rounds overlap the local shard
        state = agg.init(graph.num_nodes, src_x, dst_x, params, graph.local_shard)
        state = agg.accumulate(state, graph.local_shard, src_x, dst_x, params)
        kept = {}
        for ring_round, owner, rows in fetch:
            state = agg.accumulate(state, graph.shards[owner], rows, dst_x, params)
            if keep:
                kept[ring_round] = rows
            del rows
        out, saved = agg.finalize(graph, state, dst_x, params)
        del state
        ctx.kept, ctx.saved = kept, saved
        ctx.src_meta = (src_x.shape, src_x.dtype)
        # a linear aggregation's backward never reads the rows: do not keep them alive
        ctx.keep_out = _needs_output(agg)
        ctx.save_for_backward(*(() if agg.linear else (src_x,)), *(() if dst_x is None else (dst_x,)), *params,
                              *((out,) if ctx.keep_out else ()))
        return out

    @staticmethod
    def _forward_keeping_graph(ctx, graph, agg, src_x, dst_x, params):
        with torch.enable_grad():
            src_leaf = src_x.detach().requires_grad_(True)
            dst_leaf = None if dst_x is None else dst_x.detach().requires_grad_(True)
            param_leaves = [p.detach().requires_grad_(True) for p in params]
            fetch = ring_fetch(graph, src_x, graph.config.prefetch)
            state = agg.init(graph.num_nodes, src_leaf, dst_leaf, param_leaves, graph.local_shard)
            state = agg.accumulate(state, graph.local_shard, src_leaf, dst_leaf, param_leaves)
            kept = {}
            for ring_round, owner, rows in fetch:
                kept[ring_round] = rows.requires_grad_(True)
                state = agg.accumulate(state, graph.shards[owner], kept[ring_round], dst_leaf, param_leaves)
                del rows
            out, _ = agg.finalize(graph, state, dst_leaf, param_leaves)
        ctx.graph_leaves = (out, src_leaf, dst_leaf, param_leaves, kept)
        return out.detach()

    @staticmethod
    def _backward_through_graph(ctx, grad_out):
        out, src_leaf, dst_leaf, param_leaves, kept = ctx.graph_leaves
        ctx.graph_leaves = None
        graph = ctx.graph
        rounds = sorted(kept)
        leaves = [src_leaf] + ([dst_leaf] if dst_leaf is not None else []) + param_leaves \
            + [kept[ring_round] for ring_round in rounds]
        grads = torch.autograd.grad(out, leaves, grad_out, allow_unused=True)
        grads = [torch.zeros_like(leaf) if grad is None else grad for leaf, grad in zip(leaves, grads)]
        grad_src = grads[0]
        grad_dst = grads[1] if dst_leaf is not None else None
        offset = 1 + (dst_leaf is not None)
        grad_params = grads[offset:offset + len(param_leaves)]
        returns = GradReturn(graph, grad_src, graph.config.prefetch + 1)
        for ring_round, grad_rows in zip(rounds, grads[offset + len(param_leaves):]):
            returns.post(ring_round, grad_rows)
        returns.finish()
        return (None, None, None, grad_src, grad_dst, *grad_params)

    @staticmethod
    @phases.tagged("aggregation_backward")
    def backward(ctx, grad_out):
        if ctx.graph_leaves is not None:
            return SequentialAggregate._backward_through_graph(ctx, grad_out)
        graph, agg = ctx.graph, ctx.agg
        tensors = list(ctx.saved_tensors)
        src_x = None if agg.linear else tensors.pop(0)
        dst_x = tensors.pop(0) if ctx.has_dst else None
        out = tensors.pop() if ctx.keep_out else None
        params = tuple(tensors)
        grad_out = grad_out.contiguous()
        shape, dtype = ctx.src_meta
        grad_src = torch.zeros(shape, dtype=dtype)
        grad_dst = _zeros_or_none(dst_x)
        grad_params = [torch.zeros_like(p) for p in params]
        returns = GradReturn(graph, grad_src, graph.config.prefetch + 1)

        def local_shard() -> None:
            into = getattr(agg, "vjp_into", False)  # the aggregator adds the rows' gradient into grad_src itself
            grad_rows, shard_grad_dst, shard_grad_params = agg.shard_vjp(
                graph, ctx.saved, out, graph.local_shard, src_x, dst_x, params, grad_out,
                **({"grad_rows": grad_src} if into else {}))
            if not into:
                grad_src.add_(grad_rows)
            _add_into(grad_dst, grad_params, shard_grad_dst, shard_grad_params)
            _self_vjp(agg, graph, ctx.saved, out, dst_x, grad_out, grad_dst)

        if agg.linear:  # case 1: A_q^T g needs no source rows (sa kept them all the same)
            ctx.kept = {}
            scaled = agg.linear_scale(graph, grad_out)
            for ring_round in range(1, graph.world):  # remote gradients go out first and overlap the local shard
                owner = _ring_peers(graph, ring_round)[1]
                returns.post(ring_round, graph.shards[owner].spmm(scaled, transpose=True))
            graph.local_shard.spmm(scaled, transpose=True, out=grad_src)  # the local share, added in place
            _self_vjp(agg, graph, ctx.saved, out, dst_x, grad_out, grad_dst)
            del scaled
        else:
            if ctx.kept:
                fetched = ((ring_round, _ring_peers(graph, ring_round)[1], ctx.kept.pop(ring_round))
                           for ring_round in range(1, graph.world))
            else:  # re-fetch, the first rounds overlapping the local shard
                fetched = ring_fetch(graph, src_x, graph.config.prefetch)
            local_shard()
            for ring_round, owner, rows in fetched:
                grad_rows, shard_grad_dst, shard_grad_params = phases.run(
                    "rematerialization", agg.shard_vjp, graph, ctx.saved, out, graph.shards[owner], rows, dst_x,
                    params, grad_out)
                del rows
                _add_into(grad_dst, grad_params, shard_grad_dst, shard_grad_params)
                returns.post(ring_round, grad_rows)
                del grad_rows
        returns.finish()
        ctx.kept = {}
        return (None, None, None, grad_src, grad_dst, *grad_params)


class HaloExchange(torch.autograd.Function):
    """``[own rows; rows from peer 0; rows from peer 1; ...]`` in one exchange with every peer."""

    @staticmethod
    @phases.tagged("halo_exchange")
    def forward(ctx, graph, src_x):
        num_own, tail = graph.num_src, src_x.shape[1:]
        total = num_own + sum(graph.index.recv_counts[peer] for peer in range(graph.world) if peer != graph.rank)
        own_and_halo = torch.empty((total, *tail), dtype=src_x.dtype)
        own_and_halo[:num_own] = src_x
        sends, recvs, offset = [], [], num_own
        for peer in range(graph.world):
            if peer == graph.rank:
                continue
            sends.append((peer, src_x[graph.index.send_rows[peer]]))
            count = graph.index.recv_counts[peer]
            recvs.append((peer, own_and_halo[offset:offset + count]))
            offset += count
        graph.comm.exchange(sends, recvs, TAG_HALO).wait()
        ctx.graph = graph
        return own_and_halo

    @staticmethod
    @phases.tagged("gradient_return")
    def backward(ctx, grad_own_and_halo):
        graph = ctx.graph
        num_own = graph.num_src
        grad_src = grad_own_and_halo[:num_own].clone()
        sends, recvs, offset = [], [], num_own
        for peer in range(graph.world):
            if peer == graph.rank:
                continue
            count = graph.index.recv_counts[peer]
            sends.append((peer, grad_own_and_halo[offset:offset + count].contiguous()))
            recvs.append((peer, torch.empty((graph.index.send_rows[peer].numel(), *grad_own_and_halo.shape[1:]),
                                            dtype=grad_own_and_halo.dtype)))
            offset += count
        graph.comm.exchange(sends, recvs, TAG_HALO_GRADS).wait()
        for peer, received in recvs:
            grad_src.index_add_(0, graph.index.send_rows[peer], received)
        return None, grad_src


class ShardAggregate(torch.autograd.Function):
    """Aggregation over one shard whose source rows are all present (oneshot, or a single worker)."""

    @staticmethod
    @phases.tagged("aggregation")
    def forward(ctx, graph, agg, shard, src_x, dst_x, *params):
        state = agg.init(shard.num_dst, src_x, dst_x, params, shard)
        state = agg.accumulate(state, shard, src_x, dst_x, params)
        out, saved = agg.finalize(graph, state, dst_x, params)
        ctx.graph, ctx.agg, ctx.shard, ctx.saved, ctx.has_dst = graph, agg, shard, saved, dst_x is not None
        ctx.rows_shape = src_x.shape
        keep_rows = () if agg.linear else (src_x,)  # a linear aggregation's backward never reads its input
        ctx.keep_rows = bool(keep_rows)
        ctx.keep_out = _needs_output(agg)
        ctx.save_for_backward(*keep_rows, *(() if dst_x is None else (dst_x,)), *params,
                              *((out,) if ctx.keep_out else ()))
        return out

    @staticmethod
    @phases.tagged("aggregation_backward")
    def backward(ctx, grad_out):
        tensors = list(ctx.saved_tensors)
        rows = tensors.pop(0) if ctx.keep_rows else None
        dst_x = tensors.pop(0) if ctx.has_dst else None
        out = tensors.pop() if ctx.keep_out else None
        params = tuple(tensors)
        grad_rows, grad_dst, grad_params = ctx.agg.shard_vjp(ctx.graph, ctx.saved, out, ctx.shard, rows, dst_x,
                                                             params, grad_out.contiguous())
        if ctx.has_dst and grad_dst is None:
            grad_dst = torch.zeros_like(dst_x)
        if ctx.has_dst:
            _self_vjp(ctx.agg, ctx.graph, ctx.saved, out, dst_x, grad_out, grad_dst)
        grad_params = list(grad_params) or [torch.zeros_like(p) for p in params]
        return (None, None, None, grad_rows, grad_dst, *grad_params)


def run_aggregation(graph, agg, src_x: torch.Tensor, dst_x, params: tuple) -> torch.Tensor:
    """Dispatch on ``graph.config.mode`` (a single worker always takes the one-shard path)."""
    if src_x.shape[0] != graph.num_src:
        raise ValueError(f"aggregate: src_x has {src_x.shape[0]} rows, this worker has {graph.num_src} source rows")
    src_x = src_x.contiguous()
    plain_autograd = getattr(agg, "keeps_graph", False)  # plain autograd in oneshot (and on one worker)
    if graph.world == 1:
        if plain_autograd:
            return autograd_aggregate(agg, graph, graph.local_shard, src_x, dst_x, params)
        return ShardAggregate.apply(graph, agg, graph.local_shard, src_x, dst_x, *params)
    mode = graph.config.mode
    if mode == "oneshot":
        own_and_halo = HaloExchange.apply(graph, src_x)
        if plain_autograd:
            return autograd_aggregate(agg, graph, graph.merged_shard(), own_and_halo, dst_x, params)
        return ShardAggregate.apply(graph, agg, graph.merged_shard(), own_and_halo, dst_x, *params)
    return SequentialAggregate.apply(graph, agg, mode == "sa", src_x, dst_x, *params)
