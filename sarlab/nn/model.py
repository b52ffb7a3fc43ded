"""The multi-layer model: conv -> BatchNorm -> ReLU -> dropout per hidden layer, conv for the logits."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from sarlab.data.validate_data import InputError
from sarlab.nn.functional import dropout_by_id
from sarlab.nn.gat import GATConv
from sarlab.nn.gcn import GCNConv
from sarlab.nn.norm import DistBatchNorm
from sarlab.nn.rgcn import RGCNConv
from sarlab.nn.sage import AGGRS, SAGEConv

MODELS = ("gcn", "sage", "gat", "rgcn")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a :class:`GNN`.

    Args:
        model: ``gcn``, ``sage``, ``gat`` or ``rgcn`` (relational GCN; the relations come from the graph).
        layers: number of graph convolutions (>= 1).
        hidden: hidden feature size (for GAT: per-layer output is ``heads * hidden // heads``).
        aggr: SAGE aggregator (``mean``, ``max``, ``pool``).
        heads: GAT attention heads.
        self_loops: GAT: every node also attends to itself.
        bases: R-GCN: basis decomposition with this many bases (0: one weight per relation).
        dropout: dropout probability after each hidden layer.
        batchnorm: distributed BatchNorm after each hidden layer.
        seed: parameter initialisation and dropout seed.
    """

    model: str = "sage"
    layers: int = 2
    hidden: int = 64
    aggr: str = "mean"
    heads: int = 4
    self_loops: bool = True
    bases: int = 0
    dropout: float = 0.0
    batchnorm: bool = False
    seed: int = 0

    def __post_init__(self):
        if self.model not in MODELS:
            raise InputError(f"unknown model {self.model!r}: choose one of {', '.join(MODELS)}")
        if self.aggr not in AGGRS:
            raise InputError(f"unknown SAGE aggregator {self.aggr!r}: choose one of {', '.join(AGGRS)}")
        if self.layers < 1 or self.hidden < 1 or self.heads < 1 or self.bases < 0:
            raise InputError("layers, hidden and heads must be >= 1, bases >= 0")
        if not 0.0 <= self.dropout < 1.0:
            raise InputError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.model == "gat" and self.hidden % self.heads:
            raise InputError(f"GAT hidden size {self.hidden} must be divisible by heads {self.heads}")


def make_conv(cfg: ModelConfig, in_dim: int, out_dim: int, last: bool, num_relations: int = 1) -> nn.Module:
    """The graph convolution of one layer of a :class:`GNN` (``last``: the layer producing the logits)."""
    if cfg.model == "gcn":
        return GCNConv(in_dim, out_dim)
    if cfg.model == "rgcn":
        return RGCNConv(in_dim, out_dim, num_relations, num_bases=cfg.bases or None)
    if cfg.model == "sage":
        return SAGEConv(in_dim, out_dim, cfg.aggr)
    if last:  # the output layer averages a single head into the class logits
        return GATConv(in_dim, out_dim, heads=1, concat=False, add_self_loops=cfg.self_loops)
    return GATConv(in_dim, out_dim // cfg.heads, heads=cfg.heads, concat=True, add_self_loops=cfg.self_loops)


class GNN(nn.Module):
    """A stack of graph convolutions; an ordinary ``nn.Module`` whose forward takes the sharded graph.

    Hidden layers apply conv, optional :class:`DistBatchNorm`, ReLU and id-keyed dropout (the mask is a
    function of the seed, epoch, layer, global node id and feature, so it is the same for any number of
    workers). The last conv produces the class logits. Layer ``i`` runs on ``graph.layer(i)``: the whole
    graph, or with message-flow-graph pruning (:mod:`sarlab.strategies.mfg`) the rows that reach a loss node.

    Args:
        cfg: the architecture.
        in_dim: input feature size.
        num_classes: output size.
        num_relations: relations of the graph (R-GCN's weights; other models ignore it).
    """

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int, num_relations: int = 1):
        super().__init__()
        self.cfg = cfg
        with torch.random.fork_rng():
            torch.manual_seed(cfg.seed)
            dims = [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [num_classes]
            self.convs = nn.ModuleList(make_conv(cfg, dims[i], dims[i + 1], i == cfg.layers - 1, num_relations)
                                       for i in range(cfg.layers))
            self.norms = nn.ModuleList(DistBatchNorm(cfg.hidden) for _ in range(cfg.layers - 1)) \
                if cfg.batchnorm else None

    def forward(self, graph, x: torch.Tensor, epoch: int = 0) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            layer_graph = graph.layer(i)
            x = conv(layer_graph, x)
            if i < len(self.convs) - 1:
                if self.norms is not None:
                    x = self.norms[i](layer_graph, x)
                x = torch.relu(x)
                x = dropout_by_id(x, self.cfg.dropout, layer_graph.orig_ids, (self.cfg.seed, epoch, i), self.training)
        return x
