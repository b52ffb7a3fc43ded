"""What a PyG model receives as ``edge_index`` (and ``edge_type``) on a sarlab worker: the sharded graph."""
from __future__ import annotations

from sarlab.data.validate_data import InputError


class ShardedEdges:
    """What a PyG model receives as ``edge_index`` on a worker: the worker's sharded graph.

    Only ``MessagePassing`` layers may use it (their ``propagate`` runs over the shards); a model that reads
    ``edge_index`` itself (its size, a slice, edge dropout) gets an error saying so.
    """

    __slots__ = ("graph",)

    def __init__(self, graph):
        self.graph = graph

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        raise InputError(f"the model reads edge_index.{name}: on a sarlab worker edge_index stands for the sharded "
                         "graph, which only MessagePassing layers may use (no edge-level operations in the model)")

    def __repr__(self) -> str:
        return f"ShardedEdges(rank {self.graph.rank} of {self.graph.world}, {self.graph.num_nodes} local nodes)"


class ShardedEdgeTypes(ShardedEdges):
    """What a PyG model receives as ``edge_type``: the relations live in the sharded graph's shards."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"ShardedEdgeTypes({self.graph.num_relations} relations)"
