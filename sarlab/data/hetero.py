"""Heterogeneous graphs: a synthetic generator shaped like ogbn-mag, and ogbn-mag's OGB layout read from disk.

Both return one :class:`~sarlab.data.graph_data.Graph` with node types (``author``, ``field_of_study``,
``institution``, ``paper``, in OGB's sorted order, as contiguous id blocks) and relations, OGB's four
``(head, relation, tail)`` triplets (``author/affiliated_with/institution``, ``author/writes/paper``,
``paper/cites/paper``, ``paper/has_topic/field_of_study``), optionally each with its reverse
(``paper/rev_writes/author``, ...), as OGB's and DGL's R-GCN examples for ogbn-mag add them. Only papers have
features, labels and splits. Nodes of the other types get zero feature rows (sarlab learns no per-node
embeddings: they would be parameters owned by one worker each, unlike the replicated weights everything else
uses); every node's features end in a one-hot of its node type, so a layer's shared root weight can still tell
the types apart.
"""
from __future__ import annotations

import os

import numpy as np

from sarlab.data.graph_data import Graph, check_fractions, checked, classes_of, clean_typed_edges, split_masks
from sarlab.data.validate_data import InputError, integer_labels

NODE_TYPES = ("author", "field_of_study", "institution", "paper")
RELATIONS = (("author", "affiliated_with", "institution"), ("author", "writes", "paper"),
             ("paper", "cites", "paper"), ("paper", "has_topic", "field_of_study"))
#: ogbn-mag's node counts per type and edges per node of each relation's head or tail type (OGB's statistics)
MAG_NODES = {"author": 1_134_649, "field_of_study": 59_965, "institution": 8_740, "paper": 736_389}
MAG_EDGES = {"affiliated_with": 1_043_998, "writes": 7_145_660, "cites": 5_416_271, "has_topic": 7_505_078}
#: the master.csv column of ogbn-mag (ogb 1.3), plus the triplets its raw/ folder holds (sarlab's addition)
OGBN_MAG_META = {"version": "2", "split": "time", "binary": "False", "is hetero": "True", "num tasks": "1",
                 "has_node_attr": "True", "labelled types": ("paper",), "feature types": ("paper",),
                 "relations": tuple("___".join(t) for t in RELATIONS)}
OGB_HETERO = {"ogbn-mag": OGBN_MAG_META}
HETERO_TYPES = {"nodes": int, "degree": float, "features": int, "classes": int, "homophily": float,
                "power": float, "noise": float, "seed": int, "train": float, "val": float, "reverse": int}


def relation_name(triplet: tuple[str, str, str]) -> str:
    """``head/relation/tail``."""
    return "/".join(triplet)


def with_reverse(src: np.ndarray, dst: np.ndarray, etype: np.ndarray, names: list[str]):
    """Append the reverse of every relation as a new relation ``tail/rev_rel/head`` (ids ``R`` to ``2R-1``)."""
    reverse_names = []
    for name in names:
        head, rel, tail = name.split("/")
        reverse_names.append(f"{tail}/rev_{rel}/{head}")
    return (np.concatenate([src, dst]), np.concatenate([dst, src]), np.concatenate([etype, etype + len(names)]),
            names + reverse_names)


def _type_features(features: np.ndarray, node_type: np.ndarray) -> np.ndarray:
    """``[features, one-hot(node type)]`` as float32."""
    onehot = np.zeros((node_type.size, len(NODE_TYPES)), dtype=np.float32)
    onehot[np.arange(node_type.size), node_type] = 1.0
    return np.concatenate([features.astype(np.float32, copy=False), onehot], 1)


class _Sampler:
    """Draws nodes of one type with probability proportional to a power-law weight, optionally within a class."""

    def __init__(self, first: int, theta: np.ndarray, classes: np.ndarray, num_classes: int):
        self.first = first
        self.cum = np.cumsum(theta)
        self.order = np.argsort(classes, kind="stable")
        self.cum_sorted = np.cumsum(theta[self.order])
        counts = np.bincount(classes, minlength=num_classes)
        self.seg_end = np.cumsum(counts)
        self.seg_start = self.seg_end - counts

    def anywhere(self, rng: np.random.Generator, k: int) -> np.ndarray:
        pick = np.searchsorted(self.cum, rng.random(k) * self.cum[-1], side="right")
        return self.first + np.minimum(pick, self.cum.size - 1)

    def in_class(self, rng: np.random.Generator, wanted: np.ndarray) -> np.ndarray:
        start, end = self.seg_start[wanted], self.seg_end[wanted]
        base = np.where(start > 0, self.cum_sorted[np.maximum(start - 1, 0)], 0.0)
        total = self.cum_sorted[np.maximum(end - 1, 0)] - base
        pos = np.searchsorted(self.cum_sorted, base + rng.random(wanted.size) * total, side="right")
        empty = end <= start  # a class without nodes of this type: fall back to anywhere
        local = self.order[np.minimum(np.clip(pos, start, np.maximum(end - 1, start)), self.order.size - 1)]
        return np.where(empty, self.anywhere(rng, wanted.size), self.first + local)

    def mixed(self, rng: np.random.Generator, wanted: np.ndarray, homophily: float) -> np.ndarray:
        same = rng.random(wanted.size) < homophily
        return np.where(same, self.in_class(rng, wanted), self.anywhere(rng, wanted.size))


def hetero_graph(nodes: int = 20_000, degree: float = 1.0, features: int = 128, classes: int = 16,
                 homophily: float = 0.6, power: float = 2.5, noise: float = 2.0, seed: int = 0,
                 train: float = 0.6, val: float = 0.2, reverse: int = 0) -> Graph:
    """A heterogeneous graph shaped like ogbn-mag: its node-type mix, relations and edges per node.

    Node types take ogbn-mag's shares of ``nodes`` (authors 58.5 %, fields 3.1 %, institutions 0.45 %,
    papers 38 %); each relation gets ogbn-mag's edges per head (or tail) node times ``degree``. Every node has
    a class (papers: their label; authors, fields, institutions: a "home" class) and a power-law weight
    ``theta ~ 1 + Pareto(power - 1)``. An edge picks its first end by ``theta`` and, with probability
    ``homophily``, its other end by ``theta`` among nodes of the same class (else among all of that type). Paper
    features are ``mu_y + noise * N(0, I)`` (class centroids ``mu ~ N(0, I)``), other types' are zero; all end
    in a one-hot node type (``features + 4`` columns). Splits cover papers only.

    Args:
        nodes: total number of nodes (>= 20).
        degree: multiplies ogbn-mag's edges per node.
        features: paper feature dimension.
        classes: number of paper classes (ogbn-mag: 349 venues).
        homophily: probability that an edge joins two nodes of the same class.
        power: tail exponent of the weights (larger = more uniform degrees).
        noise: paper feature noise relative to the centroid scale.
        seed: everything is a deterministic function of the seed.
        train, val: fractions of the papers in the train and validation splits (the rest is test).
        reverse: 1 adds the reverse of every relation (8 relations), as R-GCN examples for ogbn-mag do.
    """
    if nodes < 20 or degree <= 0 or features < 1 or classes < 2:
        raise InputError(f"hetero graph needs nodes>=20, degree>0, features>=1, classes>=2; got nodes={nodes}, "
                         f"degree={degree}, features={features}, classes={classes}")
    if not 0.0 <= homophily <= 1.0 or reverse not in (0, 1):
        raise InputError(f"hetero graph needs 0 <= homophily <= 1 and reverse 0 or 1; got homophily={homophily}, "
                         f"reverse={reverse}")
    check_fractions(train, val)
    rng = np.random.default_rng(seed)
    total_mag = sum(MAG_NODES.values())
    counts = {t: max(2, int(round(nodes * MAG_NODES[t] / total_mag))) for t in NODE_TYPES}
    counts["author"] = nodes - sum(counts[t] for t in NODE_TYPES if t != "author")
    first = dict(zip(NODE_TYPES, np.concatenate([[0], np.cumsum([counts[t] for t in NODE_TYPES])])))
    node_type = np.repeat(np.arange(len(NODE_TYPES)), [counts[t] for t in NODE_TYPES])
    node_class = rng.integers(classes, size=nodes)
    theta = np.minimum(1.0 + rng.pareto(max(power - 1.0, 0.1), size=nodes), nodes / 10.0 + 1.0)
    samplers = {t: _Sampler(int(first[t]), theta[first[t]:first[t] + counts[t]],
                            node_class[first[t]:first[t] + counts[t]], classes) for t in NODE_TYPES}
    src, dst, etype = [], [], []
    for r, (head, rel, tail) in enumerate(RELATIONS):
        anchor = tail if tail == "paper" else head  # the type whose per-node edge count matches ogbn-mag
        k = int(round(counts[anchor] * degree * MAG_EDGES[rel] / MAG_NODES[anchor])) + 1
        ends = samplers[anchor].anywhere(rng, k)
        other = samplers[head if anchor == tail else tail].mixed(rng, node_class[ends], homophily)
        heads, tails = (other, ends) if anchor == tail else (ends, other)
        src.append(heads)
        dst.append(tails)
        etype.append(np.full(k, r))
    src, dst, etype = clean_typed_edges(np.concatenate(src), np.concatenate(dst), np.concatenate(etype), nodes)
    names = [relation_name(t) for t in RELATIONS]
    if reverse:
        src, dst, etype, names = with_reverse(src, dst, etype, names)
    paper = node_type == NODE_TYPES.index("paper")
    x = np.zeros((nodes, features), dtype=np.float32)
    centroids = rng.standard_normal((classes, features))
    x[paper] = (noise * rng.standard_normal((int(paper.sum()), features))
                + centroids[node_class[paper]]).astype(np.float32)
    labels = np.where(paper, node_class, -1).astype(np.int64)
    masks = split_masks(nodes, seed, train, val, eligible=paper)
    name = f"hetero-n{nodes}-d{degree:g}-f{features}-c{classes}-s{seed}" + ("-rev" if reverse else "")
    return checked(Graph(name, nodes, src, dst, _type_features(x, node_type), labels, *masks, classes,
                         node_type=node_type, edge_type=etype, node_type_names=NODE_TYPES,
                         relation_names=tuple(names)))


def ogb_hetero_needed_files(meta: dict) -> list[str]:
    """Files (relative to the dataset folder) that :func:`read_ogb_hetero` reads: OGB's raw CSVs and splits."""
    raw = ["raw/num-node-dict.csv.gz", "raw/triplet-type-list.csv.gz", "raw/nodetype-has-label.csv.gz"]
    raw += [f"raw/relations/{rel}/edge.csv.gz" for rel in meta["relations"]]
    raw += [f"raw/node-feat/{t}/node-feat.csv.gz" for t in meta["feature types"]]
    raw += [f"raw/node-label/{t}/node-label.csv.gz" for t in meta["labelled types"]]
    split = f"split/{meta['split']}"
    splits = [f"{split}/nodetype-has-split.csv.gz"]
    splits += [f"{split}/{t}/{k}.csv.gz" for t in meta["labelled types"] for k in ("train", "valid", "test")]
    return [f"RELEASE_v{meta['version']}.txt"] + raw + splits


def _csv(path: str, header: bool = False):
    import pandas as pd

    return pd.read_csv(path, compression="gzip", header=0 if header else None)


def read_ogb_hetero(folder: str, name: str, meta: dict, reverse: bool = False) -> Graph:
    """A heterogeneous OGB node dataset (ogbn-mag) from the raw CSVs of its OGB layout in ``folder``.

    Reads ``raw/`` and ``split/`` with pandas (not through the ``ogb`` package, so nothing can download); node
    types become contiguous id blocks in sorted type order; features of types without ``node-feat`` are zero;
    the official split of the labelled types. ``reverse`` adds every relation's reverse.
    """
    raw = os.path.join(folder, "raw")
    count_row = _csv(os.path.join(raw, "num-node-dict.csv.gz"), header=True)
    types = sorted(count_row.columns)
    if tuple(types) != NODE_TYPES:
        raise InputError(f"{folder}: node types {types}, sarlab reads OGB datasets with types {list(NODE_TYPES)}")
    counts = [int(count_row[t].iloc[0]) for t in types]
    offset = dict(zip(types, np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()))
    n = int(sum(counts))
    node_type = np.repeat(np.arange(len(types)), counts)
    triplets = sorted(tuple(row) for row in _csv(os.path.join(raw, "triplet-type-list.csv.gz")).values.tolist())
    src, dst, etype = [], [], []
    for r, (head, rel, tail) in enumerate(triplets):
        edges = _csv(os.path.join(raw, "relations", f"{head}___{rel}___{tail}", "edge.csv.gz")).values.T
        src.append(edges[0].astype(np.int64) + offset[head])
        dst.append(edges[1].astype(np.int64) + offset[tail])
        etype.append(np.full(edges.shape[1], r))
    # self-loops dropped (a paper citing itself): the root weight is a layer's self term
    src, dst, etype = clean_typed_edges(np.concatenate(src), np.concatenate(dst), np.concatenate(etype), n)
    names = [relation_name(t) for t in triplets]
    if reverse:
        src, dst, etype, names = with_reverse(src, dst, etype, names)
    feats = {}
    for t in types:
        path = os.path.join(raw, "node-feat", t, "node-feat.csv.gz")
        if os.path.isfile(path):
            feats[t] = _csv(path).values.astype(np.float32)
    if not feats:
        raise InputError(f"{folder}: no node-feat.csv.gz for any node type; sarlab trains on node features")
    width = next(iter(feats.values())).shape[1]
    x = np.zeros((n, width), dtype=np.float32)
    for t, f in feats.items():
        x[offset[t]:offset[t] + f.shape[0]] = f
    labels = np.full(n, -1, dtype=np.int64)
    has_label = _csv(os.path.join(raw, "nodetype-has-label.csv.gz"), header=True)
    for t in has_label.columns:
        if bool(has_label[t].iloc[0]):
            y = _csv(os.path.join(raw, "node-label", t, "node-label.csv.gz")).values.reshape(-1)
            labels[offset[t]:offset[t] + y.size] = integer_labels(y, f"OGB dataset {name!r} ({t} labels)")
    masks = [np.zeros(n, dtype=bool) for _ in range(3)]
    split_dir = os.path.join(folder, "split", meta["split"])
    has_split = _csv(os.path.join(split_dir, "nodetype-has-split.csv.gz"), header=True)
    for t in has_split.columns:
        if bool(has_split[t].iloc[0]):
            for mask, key in zip(masks, ("train", "valid", "test")):
                mask[_csv(os.path.join(split_dir, t, f"{key}.csv.gz")).values.reshape(-1) + offset[t]] = True
    return checked(Graph(name + ("-rev" if reverse else ""), n, src, dst, _type_features(x, node_type), labels,
                         *masks, classes_of(labels), node_type=node_type, edge_type=etype,
                         node_type_names=tuple(types), relation_names=tuple(names)))
