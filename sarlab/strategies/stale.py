"""Bounded-staleness halos (``--staleness S``): each layer aggregates remote rows computed up to S epochs ago.

Layer ``l`` of worker ``p`` at epoch ``e`` computes

.. math::
    h_i^{(l+1)} = \\phi\\big(h_i^{(l)},\\ \\square_{j \\in N(i)} m(h_j^{(l)}[\\text{own}(j) = p\\ ?\\ e : e_s])\\big),
    \\qquad e_s = \\max(e - S,\\ e_0),

where ``e_0`` is the first epoch of the run and ``h_j`` is the row the layer hands to the aggregation (its input
for SAGE; ``W h_j`` scaled for GCN; ``W h_j`` and its source attention score for GAT, each with the weights of the
epoch that computed it): own rows are always current, rows of other workers (the halo) come
from epoch ``e_s``. Epoch ``e_0`` is ``oneshot``, exact in forward and backward (its halo rows, gradients
included, go through :class:`~sarlab.core.aggregate.HaloExchange`), and caches the halo rows; every later epoch posts
the non-blocking exchange of its own rows at the start of each layer and aggregates with rows posted ``S`` epochs
before (``S = 1``: epoch 1 uses epoch 0's rows), so a fetch overlaps
``S`` whole epochs of work. ``S = 0`` never reaches this module: the trainer then runs the exact modes unchanged.

Gradients: stale halo rows are constants. Their owner gets no gradient for them, so the gradient of a
parameter is that of the loss with the halo held fixed (the Dorylus / PipeGCN-style approximation without
their stale-gradient channel). Sending stale gradients back would double the traffic and add a second cache
per layer for an update that is itself ``S`` epochs old; the measured question here is what dropping the
exchange from the critical path costs in accuracy, and the simplest consistent rule answers it.

Aggregation: both ``sar`` and ``oneshot`` take the one-shard path over ``[own rows; cached halo rows]``
(:class:`~sarlab.core.aggregate.ShardAggregate` on :meth:`~sarlab.core.shards.ShardedGraph.merged_shard`). Every halo
row must be resident anyway (``S + 1`` halo buffers per layer: ``S`` in flight and the one in use), so the
ring's memory saving does not apply to stale training; the peak memory in the records shows that cost.

The last epoch (``last=True``) posts no new fetch (nobody would use it) and drains what is still in flight, so no
exchange outlives training. Evaluation runs on the plain graph, with exact halos.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import NamedTuple

import torch

from sarlab.core import phases
from sarlab.core.aggregate import HaloExchange, ShardAggregate, autograd_aggregate
from sarlab.core.comm import Pending
from sarlab.data.validate_data import check_int
from sarlab.strategies.hooks import Strategy, TrainView

#: point-to-point tag of layer slot ``k``'s stale exchanges: ``TAG_STALE + k`` (the exact modes use 1..4)
TAG_STALE = 64


class PostedHalo(NamedTuple):
    """Halo rows of one layer computed at ``epoch``; they are in ``rows`` once ``pending`` completes.

    ``sent`` (my rows gathered for the peers) is held until then.
    """

    epoch: int
    rows: torch.Tensor
    pending: Pending
    sent: list


class StaleHalos:
    """Per-layer caches of halo rows for a worker training with staleness ``S >= 1``.

    Args:
        graph: the worker's :class:`~sarlab.core.shards.ShardedGraph` (a whole graph: not an MFG view).
        staleness: ``S >= 1``, how many epochs old the halo rows may be.
    """

    def __init__(self, graph, staleness: int):
        if staleness < 1:
            raise ValueError(f"StaleHalos needs staleness >= 1 (S = 0 is the exact path), got {staleness}")
        self.graph, self.staleness = graph, staleness
        self.slots: list[deque[PostedHalo]] = []
        self.first_epoch: int | None = None

    def view(self, epoch: int, last: bool = False) -> StaleGraph:
        """The graph the model's training forward of ``epoch`` runs on (``last``: the run's final epoch)."""
        if self.first_epoch is None:
            self.first_epoch = epoch
        return StaleGraph(self, epoch, last)

    @phases.tagged("halo_exchange")
    def _post(self, slot: int, src_x: torch.Tensor, epoch: int) -> PostedHalo:
        graph = self.graph
        peers = [q for q in range(graph.world) if q != graph.rank]
        halo = sum(graph.index.recv_counts[q] for q in peers)
        rows = torch.empty((halo, *src_x.shape[1:]), dtype=src_x.dtype)
        sends, recvs, offset = [], [], 0
        with torch.no_grad():
            for q in peers:
                sends.append((q, src_x[graph.index.send_rows[q]].contiguous()))
                count = graph.index.recv_counts[q]
                recvs.append((q, rows[offset:offset + count]))
                offset += count
        pending = graph.comm.exchange(sends, recvs, TAG_STALE + slot)
        return PostedHalo(epoch, rows, pending, [t for _, t in sends])

    def cached(self, slot: int) -> bool:
        """Whether layer slot ``slot`` has halo rows cached (false in the first epoch)."""
        return slot < len(self.slots) and bool(self.slots[slot])

    def keep(self, slot: int, epoch: int, rows: torch.Tensor, last: bool) -> None:
        """Cache the halo rows layer slot ``slot`` received by an exact exchange at ``epoch``."""
        if slot == len(self.slots):
            self.slots.append(deque())
        if not last:
            self.slots[slot].append(PostedHalo(epoch, rows, Pending([], self.graph.comm.stats, done=True), []))

    @phases.tagged("halo_exchange")
    def halo_rows(self, slot: int, src_x: torch.Tensor, epoch: int, last: bool) -> torch.Tensor:
        """The halo rows layer slot ``slot`` aggregates at ``epoch`` (rows of epoch ``max(epoch - S, first)``).

        Posts the exchange of ``src_x``'s rows for later epochs (not in the last one) before waiting.
        """
        queue = self.slots[slot]
        assert queue, "halo_rows before the exact first epoch cached any rows"
        if not last:
            queue.append(self._post(slot, src_x, epoch))
        wanted = max(epoch - self.staleness, self.first_epoch)
        while len(queue) > 1 and queue[0].epoch < wanted:
            queue[0].pending.wait()
            queue.popleft()
        used = queue[0]
        used.pending.wait()
        if last:  # drain: nothing posted now may outlive training
            for posted in queue:
                posted.pending.wait()
            rows = used.rows
            queue.clear()
            return rows
        return used.rows

    def cached_bytes(self) -> int:
        """Bytes of halo rows held in the caches (in flight or in use)."""
        return sum(p.rows.numel() * p.rows.element_size() for queue in self.slots for p in queue)


class StaleGraph:
    """The graph seen by one training forward under staleness: ``aggregate`` uses cached halo rows.

    Every other attribute is the wrapped :class:`~sarlab.core.shards.ShardedGraph`'s. Aggregation calls are numbered
    in the order the model makes them (one per layer for the built-in models), which names their cache slot;
    the order is the same every epoch.
    """

    def __init__(self, halos: StaleHalos, epoch: int, last: bool):
        self._halos, self._epoch, self._last, self._calls = halos, epoch, last, 0
        self._graph = halos.graph

    def __getattr__(self, name: str):
        return getattr(self._graph, name)

    def layer(self, index: int) -> StaleGraph:
        """Every layer runs on the whole graph (staleness does not combine with MFG pruning)."""
        return self

    def aggregate(self, aggregator, src_x: torch.Tensor, dst_x: torch.Tensor | None = None,
                  params: tuple = ()) -> torch.Tensor:
        """Aggregate over own rows (current, with gradient) and halo rows (stale, constant)."""
        graph = self._graph
        if src_x.shape[0] != graph.num_src:
            raise ValueError(f"aggregate: src_x has {src_x.shape[0]} rows, this worker has {graph.num_src} "
                             "source rows")
        slot = self._calls
        self._calls += 1
        src_x = src_x.contiguous()
        if self._halos.cached(slot):
            halo = self._halos.halo_rows(slot, src_x, self._epoch, self._last)
            own_and_halo = torch.cat([src_x, halo])
        else:  # the first epoch: exact oneshot (halo gradients go back to their owners), its rows cached
            own_and_halo = HaloExchange.apply(graph, src_x)
            self._halos.keep(slot, self._epoch, own_and_halo[graph.num_src:].detach().clone(), self._last)
        params = tuple(params)
        if getattr(aggregator, "keeps_graph", False):
            return autograd_aggregate(aggregator, graph, graph.merged_shard(), own_and_halo, dst_x, params)
        return ShardAggregate.apply(graph, aggregator, graph.merged_shard(), own_and_halo, dst_x, *params)


@dataclass(frozen=True)
class StalenessConfig:
    """Stale halos' settings (``EngineConfig.staleness``, ``--staleness S``).

    Args:
        staleness: ``S >= 1``, how many epochs old a halo row may be.
    """

    staleness: int = 1

    def __post_init__(self):
        check_int("staleness", self.staleness, 1)


class Staleness(Strategy):
    """The trainer's hooks: :class:`StaleHalos` caches built once; every training forward runs on a
    :class:`StaleGraph` (the last epoch drains the exchanges in flight). Evaluation runs on the plain graph."""

    name = "stale"
    config_type = StalenessConfig

    @classmethod
    def configure(cls, train_cfg, engine_cfg=None, given: tuple = ()) -> StalenessConfig | None:
        staleness = getattr(engine_cfg, "staleness", 0)  # S = 0: no cache, the exact modes unchanged
        return StalenessConfig(staleness) if staleness else None

    @classmethod
    def columns(cls, config: StalenessConfig | None) -> dict:
        return {"staleness": config.staleness if config is not None else 0}

    def setup(self, run) -> None:
        self.halos = StaleHalos(run.graph, self.config.staleness)

    def train_view(self, run, view: TrainView, epoch: int, last: bool) -> TrainView:
        return TrainView(self.halos.view(epoch, last=last), view.input_rows, view.output_rows)
