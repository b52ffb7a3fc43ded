"""The multi-layer model: conv -> BatchNorm -> ReLU -> dropout per hidden layer, conv for the logits."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .functional import dropout_by_id
from .gcn import GCNConv
from .norm import DistBatchNorm
from .sage import AGGRS, SAGEConv

MODELS = ("gcn", "sage", "gat")


@dataclass(frozen=True)
class ModelConfig:
    """Architecture of a :class:`GNN`.

    Args:
        model: ``gcn``, ``sage`` or ``gat``.
        layers: number of graph convolutions (>= 1).
        hidden: hidden feature size (for GAT: per-layer output is ``heads * hidden // heads``).
        aggr: SAGE aggregator (``mean``, ``max``, ``pool``).
        heads: GAT attention heads.
        self_loops: GAT: every node also attends to itself.
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
    dropout: float = 0.0
    batchnorm: bool = False
    seed: int = 0

    def __post_init__(self):
        if self.model not in MODELS:
            raise ValueError(f"unknown model {self.model!r}: choose one of {', '.join(MODELS)}")
        if self.aggr not in AGGRS:
            raise ValueError(f"unknown SAGE aggregator {self.aggr!r}: choose one of {', '.join(AGGRS)}")
        if self.layers < 1 or self.hidden < 1 or self.heads < 1:
            raise ValueError("layers, hidden and heads must be >= 1")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        if self.model == "gat" and self.hidden % self.heads:
            raise ValueError(f"GAT hidden size {self.hidden} must be divisible by heads {self.heads}")


def make_conv(cfg: ModelConfig, in_dim: int, out_dim: int, last: bool) -> nn.Module:
    if cfg.model == "gcn":
        return GCNConv(in_dim, out_dim)
    if cfg.model == "sage":
        return SAGEConv(in_dim, out_dim, cfg.aggr)
    from .gat import GATConv

    if last:  # the output layer averages a single head into the class logits
        return GATConv(in_dim, out_dim, heads=1, concat=False, add_self_loops=cfg.self_loops)
    return GATConv(in_dim, out_dim // cfg.heads, heads=cfg.heads, concat=True, add_self_loops=cfg.self_loops)


class GNN(nn.Module):
    """A stack of graph convolutions; an ordinary ``nn.Module`` whose forward takes the sharded graph.

    Hidden layers apply conv, optional :class:`DistBatchNorm`, ReLU and id-keyed dropout (the mask is a
    function of the seed, epoch, layer, global node id and feature, so it is the same for any number of
    workers). The last conv produces the class logits.
    """

    def __init__(self, cfg: ModelConfig, in_dim: int, num_classes: int):
        super().__init__()
        self.cfg = cfg
        with torch.random.fork_rng():
            torch.manual_seed(cfg.seed)
            dims = [in_dim] + [cfg.hidden] * (cfg.layers - 1) + [num_classes]
            self.convs = nn.ModuleList(make_conv(cfg, dims[i], dims[i + 1], i == cfg.layers - 1)
                                       for i in range(cfg.layers))
            self.norms = nn.ModuleList(DistBatchNorm(cfg.hidden) for _ in range(cfg.layers - 1)) \
                if cfg.batchnorm else None

    def forward(self, graph, x: torch.Tensor, epoch: int = 0) -> torch.Tensor:
        for i, conv in enumerate(self.convs):
            x = conv(graph, x)
            if i < len(self.convs) - 1:
                if self.norms is not None:
                    x = self.norms[i](graph, x)
                x = torch.relu(x)
                x = dropout_by_id(x, self.cfg.dropout, graph.orig_ids, (self.cfg.seed, epoch, i), self.training)
        return x
