"""Layers that run on a :class:`sarlab.core.shards.ShardedGraph` and the model built from them.

May import :mod:`sarlab.core`, :mod:`sarlab.data`, :mod:`sarlab.common` and :mod:`sarlab.kernels`.
It may also import :mod:`sarlab.version` (every record names the sarlab that made it).
"""
from sarlab.core.aggregators import Aggregation
from sarlab.nn.gat import GATConv
from sarlab.nn.gcn import GCNConv
from sarlab.nn.model import GNN, MODELS
from sarlab.nn.norm import DistBatchNorm
from sarlab.nn.pyg import attach as attach_pyg
from sarlab.nn.pyg import sharded as sharded_pyg
from sarlab.nn.rgcn import RGCNConv
from sarlab.nn.sage import SAGEConv

MAY_IMPORT = ("sarlab.core", "sarlab.data", "sarlab.common", "sarlab.kernels", "sarlab.version")

__all__ = ["Aggregation", "attach_pyg", "sharded_pyg", "GATConv", "GCNConv", "SAGEConv", "RGCNConv", "DistBatchNorm",
           "GNN", "MODELS"]
