"""The :class:`Graph` every source returns, and the edge, split and spec helpers the sources share.

A graph may be heterogeneous: ``node_type`` gives every node a type (index into ``node_type_names``) and
``edge_type`` every edge a relation (index into ``relation_names``). An untyped graph has one node type and
one relation; its ``node_type``/``edge_type`` are None.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sarlab.data.validate_data import InputError, check_graph


@dataclass(frozen=True)
class Graph:
    """A whole graph held by one process (before partitioning).

    Edges are directed ``src[k] -> dst[k]`` (messages flow from source to destination, as in PyG's
    ``source_to_target`` flow). Loaders return graphs without self-loops and without duplicate edges
    (for typed graphs: no duplicate (source, destination, relation) triple).
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
    node_type: np.ndarray | None = None  # int64 [num_nodes], index into node_type_names
    edge_type: np.ndarray | None = None  # int64 [E], index into relation_names
    node_type_names: tuple[str, ...] = ()
    relation_names: tuple[str, ...] = ()

    @property
    def num_edges(self) -> int:
        return int(self.src.shape[0])

    @property
    def feature_dim(self) -> int:
        return int(self.features.shape[1])

    @property
    def typed(self) -> bool:
        """Whether the graph carries node and edge types."""
        return self.edge_type is not None

    @property
    def num_relations(self) -> int:
        """Number of relations (edge types); 1 for an untyped graph."""
        return len(self.relation_names) if self.typed else 1


def clean_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, undirected: bool) -> tuple[np.ndarray, np.ndarray]:
    """Drop self-loops and duplicates (optionally add reverse edges); edges sorted by (dst, src)."""
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if undirected:
        src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
    keep = src != dst
    key = np.sort(dst[keep] * num_nodes + src[keep])  # sort + diff: far faster than np.unique's hashing
    if key.size:
        key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    return key % num_nodes, key // num_nodes


def clean_typed_edges(src: np.ndarray, dst: np.ndarray, etype: np.ndarray, num_nodes: int,
                      drop_self_loops: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Drop duplicate (src, dst, relation) triples (and self-loops); sorted by (relation, dst, src)."""
    src, dst, etype = (np.asarray(a, dtype=np.int64) for a in (src, dst, etype))
    keep = src != dst if drop_self_loops else np.ones(src.shape, dtype=bool)
    key = np.sort((etype[keep] * num_nodes + dst[keep]) * num_nodes + src[keep])
    if key.size:
        key = key[np.concatenate([[True], key[1:] != key[:-1]])]
    return key % num_nodes, (key // num_nodes) % num_nodes, key // (num_nodes * num_nodes)


def split_masks(num_nodes: int, seed: int, train: float, val: float,
                eligible: np.ndarray | None = None) -> tuple[np.ndarray, ...]:
    """Random train/val/test node masks, deterministic by seed (over the ``eligible`` nodes when given)."""
    order = np.random.default_rng(seed + 7919).permutation(num_nodes)
    if eligible is not None:
        order = order[eligible[order]]
    count = order.size
    n_train, n_val = int(round(train * count)), int(round(val * count))
    masks = [np.zeros(num_nodes, dtype=bool) for _ in range(3)]
    masks[0][order[:n_train]] = True
    masks[1][order[n_train:n_train + n_val]] = True
    masks[2][order[n_train + n_val:]] = True
    return tuple(masks)


def check_fractions(train: float, val: float) -> None:
    """Split fractions: 0 < train <= 1, 0 <= val < 1, train + val <= 1."""
    if not (0.0 < train <= 1.0 and 0.0 <= val < 1.0 and train + val <= 1.0):
        raise InputError(f"split fractions need 0 < train <= 1, 0 <= val < 1 and train + val <= 1; got "
                         f"train={train}, val={val}")


def checked(graph: Graph) -> Graph:
    """``graph`` after :func:`~sarlab.data.validate_data.check_graph` passed."""
    check_graph(graph)
    return graph


def classes_of(labels: np.ndarray) -> int:
    """Classes a label array implies: its largest class id + 1 (unlabelled -1 ignored)."""
    return int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 0


def parse_params(text: str, types: dict[str, type], what: str) -> dict:
    """Parse ``k=v,k=v`` into typed keyword arguments, naming unknown keys; a key given twice and a number that is
    not finite (``inf``, ``nan``) are refused."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" not in item:
            raise InputError(f"{what}: expected key=value, got {item!r}")
        key, value = (s.strip() for s in item.split("=", 1))
        if key not in types:
            raise InputError(f"{what}: unknown parameter {key!r}; known: {', '.join(types)}")
        if key in out:
            raise InputError(f"{what}: {key} is given twice; give each parameter once")
        try:
            out[key] = types[key](value)
        except (ValueError, OverflowError) as err:
            raise InputError(f"{what}: {key}={value!r} is not a valid {types[key].__name__}") from err
        if isinstance(out[key], float) and not np.isfinite(out[key]):
            raise InputError(f"{what}: {key}={value!r} is not a finite number")
    return out
