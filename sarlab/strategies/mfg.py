"""Message-flow-graph pruning: per layer, only the rows that reach a loss node through the remaining layers.

A node-classification loss on seed nodes ``S_L`` (the labelled training nodes) depends on layer ``l``'s output
only at ``S_l``, where ``S_{l-1} = S_l ∪ {j : j -> i, i ∈ S_l}`` (a layer's destination also reads itself: root
weight, self-loop or SAGE's ``lin_r``). So layer ``l`` (0-based conv ``l - 1``) needs its destinations ``S_l``
and its sources ``S_{l-1}`` only, and a worker fetches from a peer only the halo rows in the peer's
``S_{l-1}`` that feed its own ``S_l``. Each destination keeps every in-edge, so degrees, means and softmaxes
are the whole graph's and the loss, its gradients and the training curve equal the unpruned run's exactly.

:class:`PrunedGraph` computes the sets once, collectively (per layer, from the last, each worker tells every
peer which of the rows it would send are needed: one exchange of a byte per halo row), and builds one
:class:`~sarlab.core.shards.ShardedGraph` view per layer, which a model reaches through ``graph.layer(i)``. Models
whose layers normalise over all nodes (BatchNorm) cannot be pruned.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from sarlab.core.comm import TAG_HALO
from sarlab.core.shards import ShardedGraph, ShardIndex, typed_shard
from sarlab.data.validate_data import InputError
from sarlab.strategies.hooks import Strategy, TrainView


def _needed_rows(graph: ShardedGraph, dst_mask: torch.Tensor) -> tuple[torch.Tensor, dict, dict]:
    """Sources feeding the destinations in ``dst_mask``: (my source rows incl. the destinations, per peer the
    needed rows among those it sends me, per peer the needed rows among those I send it)."""
    src_mask = dst_mask.clone()
    recv_keep, sends, recvs = {}, [], []
    for peer, shard in enumerate(graph.shards):
        sources = shard.src[dst_mask[shard.dst]]
        if peer == graph.rank:
            src_mask[sources] = True
            continue
        keep = torch.zeros(graph.index.recv_counts[peer], dtype=torch.bool)
        keep[sources] = True
        recv_keep[peer] = keep
        sends.append((peer, keep.to(torch.uint8)))
        recvs.append((peer, torch.empty(graph.index.send_rows[peer].numel(), dtype=torch.uint8)))
    if recvs:
        graph.comm.exchange(sends, recvs, TAG_HALO).wait()
    send_keep = {peer: flags.bool() for peer, flags in recvs}
    for peer, keep in send_keep.items():
        src_mask[graph.index.send_rows[peer][keep]] = True
    return src_mask, recv_keep, send_keep


def _view(graph: ShardedGraph, src_mask: torch.Tensor, dst_mask: torch.Tensor, recv_keep: dict,
          send_keep: dict) -> ShardedGraph:
    """``graph`` restricted to the sources ``src_mask`` and destinations ``dst_mask`` (itself when nothing is
    pruned: every destination active and every peer wanting every row I send it)."""
    if bool(dst_mask.all()) and all(bool(keep.all()) for keep in send_keep.values()):
        return graph
    src_rows, dst_rows = torch.nonzero(src_mask).view(-1), torch.nonzero(dst_mask).view(-1)
    src_pos = torch.full((graph.num_nodes,), -1, dtype=torch.long)
    src_pos[src_rows] = torch.arange(src_rows.numel())
    dst_pos = torch.full((graph.num_nodes,), -1, dtype=torch.long)
    dst_pos[dst_rows] = torch.arange(dst_rows.numel())
    shards = []
    for peer, shard in enumerate(graph.shards):
        keep = dst_mask[shard.dst]
        edge_type = None if shard.edge_type is None else shard.edge_type[keep]
        if peer == graph.rank:
            sources, num_src = src_pos[shard.src[keep]], int(src_rows.numel())
        else:
            needed = recv_keep[peer]
            sources, num_src = (torch.cumsum(needed, 0) - 1)[shard.src[keep]], int(needed.sum())
        shards.append(typed_shard(peer, sources, dst_pos[shard.dst[keep]], edge_type, int(dst_rows.numel()), num_src))
    empty = torch.zeros(0, dtype=torch.long)
    send_rows = [empty if peer == graph.rank else src_pos[graph.index.send_rows[peer][send_keep[peer]]]
                 for peer in range(graph.world)]
    recv_counts = [0 if peer == graph.rank else int(recv_keep[peer].sum()) for peer in range(graph.world)]
    view = ShardedGraph(graph.comm, graph.config, int(dst_rows.numel()), graph.node_start, graph.num_nodes_global,
                        shards, ShardIndex(send_rows, recv_counts), graph.orig_ids[dst_rows],
                        num_src=int(src_rows.numel()), dst_rows=src_pos[dst_rows],
                        src_in_degree=graph.src_in_degree[src_rows], num_relations=graph.num_relations)
    assert torch.equal(view.in_degree, graph.in_degree[dst_rows]), "a pruned destination lost an in-edge"
    return view


class PrunedGraph:
    """Per-layer views of a worker's graph that compute only what reaches the seed nodes (see the module doc).

    ``graph.layer(i)`` is the view conv ``i`` runs on; the model's input is ``x[input_rows]`` and its output row
    ``k`` belongs to local node ``output_rows[k]`` (the seeds, in order). Every worker builds its plan at the same
    time (the construction exchanges messages).

    Args:
        graph: the worker's whole graph.
        seeds: bool ``[graph.num_nodes]``, the nodes whose outputs are needed (the labelled training nodes).
        num_layers: the model's number of graph convolutions.
    """

    def __init__(self, graph: ShardedGraph, seeds: torch.Tensor, num_layers: int):
        if seeds.shape != (graph.num_nodes,) or seeds.dtype != torch.bool:
            raise ValueError(f"seeds must be a bool mask over the worker's {graph.num_nodes} nodes")
        self.graph, self.num_layers = graph, num_layers
        active = [seeds.clone()]
        exchanges = []
        for _ in range(num_layers):  # from the last layer back to the input
            src_mask, recv_keep, send_keep = _needed_rows(graph, active[0])
            exchanges.insert(0, (recv_keep, send_keep))
            active.insert(0, src_mask)
        self.active = active  # active[l]: the rows layer l outputs (active[0]: the input rows)
        self.views = [_view(graph, active[i], active[i + 1], *exchanges[i]) for i in range(num_layers)]
        self.input_rows = torch.nonzero(active[0]).view(-1)
        self.output_rows = torch.nonzero(active[-1]).view(-1)

    def layer(self, index: int) -> ShardedGraph:
        """The view conv ``index`` runs on: sources ``active[index]``, destinations ``active[index + 1]``."""
        return self.views[index]

    def active_rows(self) -> list[int]:
        """This worker's active rows per level, input first (``[n_0, ..., n_L]``)."""
        return [int(mask.sum()) for mask in self.active]

    def __getattr__(self, name: str):
        """Everything else (``comm``, ``config``, ``all_reduce``, ...) is the whole graph's."""
        if name == "graph":
            raise AttributeError(name)
        return getattr(self.graph, name)


@dataclass(frozen=True)
class MFGConfig:
    """MFG pruning's settings (``TrainConfig.mfg``, ``--mfg``): none; the seeds are the labelled training nodes."""


class MFGPruning(Strategy):
    """The trainer's hooks: a :class:`PrunedGraph` of the training nodes built once; every training forward runs on
    it (the model reads ``x[input_rows]`` and returns the seeds' rows). Evaluation runs on the whole graph."""

    name = "mfg"
    config_type = MFGConfig

    @classmethod
    def configure(cls, train_cfg, engine_cfg=None, given: tuple = ()) -> MFGConfig | None:
        return MFGConfig() if train_cfg.mfg else None

    @classmethod
    def columns(cls, config: MFGConfig | None) -> dict:
        return {"mfg": config is not None}

    def check(self, model_cfg, active) -> None:
        if getattr(model_cfg, "batchnorm", False):
            raise InputError("MFG pruning computes only the rows that reach a training node, but BatchNorm "
                             "normalises over every node: drop --batchnorm or --mfg")
        if "stale" in active:
            raise InputError("--staleness caches every halo row of the whole graph, MFG pruning keeps only the rows "
                             "that reach a training node: drop --staleness or --mfg")

    def setup(self, run) -> None:
        self.plan = PrunedGraph(run.graph, run.masks["train"], run.model.cfg.layers)

    def train_view(self, run, view: TrainView, epoch: int, last: bool) -> TrainView:
        return TrainView(self.plan, self.plan.input_rows, self.plan.output_rows)
