"""Layers that run on a :class:`sarlab.shards.ShardedGraph` and the model built from them."""
from .gcn import GCNConv
from .model import GNN, MODELS
from .norm import DistBatchNorm
from .sage import SAGEConv

__all__ = ["GCNConv", "SAGEConv", "DistBatchNorm", "GNN", "MODELS"]
