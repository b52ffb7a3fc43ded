"""Layers that run on a :class:`sarlab.shards.ShardedGraph` and the model built from them."""
from .gat import GATConv
from .gcn import GCNConv
from .model import GNN, MODELS
from .norm import DistBatchNorm
from .rgcn import RGCNConv
from .sage import SAGEConv

__all__ = ["GATConv", "GCNConv", "SAGEConv", "RGCNConv", "DistBatchNorm", "GNN", "MODELS"]
