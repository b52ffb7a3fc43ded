"""Graph sources: synthetic generator, Cora-style npz, OGB local layout, PyG ``Data``.

One spec string selects a source (see :func:`load_graph`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Graph:
    """A whole graph held by one process (before partitioning).

    Edges are directed ``src[k] -> dst[k]`` (messages flow from source to destination, as in PyG's
    ``source_to_target`` flow). Loaders return graphs without self-loops and without duplicate edges.
    """

    name: str
    num_nodes: int
    src: np.ndarray  # int64 [E]
    dst: np.ndarray  # int64 [E]
    features: np.ndarray  # float32 [num_nodes, F]
    labels: np.ndarray  # int64 [num_nodes]
    train_mask: np.ndarray  # bool [num_nodes]
    val_mask: np.ndarray  # bool [num_nodes]
    test_mask: np.ndarray  # bool [num_nodes]
    num_classes: int

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    @property
    def feature_dim(self) -> int:
        return int(self.features.shape[1])
