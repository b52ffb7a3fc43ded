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


def _clean_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, undirected: bool) -> tuple[np.ndarray, np.ndarray]:
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


def _split_masks(num_nodes: int, seed: int, train: float, val: float) -> tuple[np.ndarray, ...]:
    """Random train/val/test node masks, deterministic by seed."""
    order = np.random.default_rng(seed + 7919).permutation(num_nodes)
    n_train, n_val = int(round(train * num_nodes)), int(round(val * num_nodes))
    masks = [np.zeros(num_nodes, dtype=bool) for _ in range(3)]
    masks[0][order[:n_train]] = True
    masks[1][order[n_train:n_train + n_val]] = True
    masks[2][order[n_train + n_val:]] = True
    return tuple(masks)


def _sorted_search(cum: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """``searchsorted(cum, queries, 'right')``, with the queries visited in sorted order (cache friendly)."""
    order = np.argsort(queries, kind="stable")
    out = np.empty(queries.shape[0], dtype=np.int64)
    out[order] = np.searchsorted(cum, queries[order], side="right")
    return out


def synthetic_graph(nodes: int = 10_000, degree: float = 10.0, features: int = 32, classes: int = 8,
                    homophily: float = 0.7, power: float = 2.5, noise: float = 2.0, seed: int = 0,
                    train: float = 0.6, val: float = 0.2) -> Graph:
    """Degree-corrected stochastic block model with class-correlated Gaussian features.

    Each node gets a class ``y`` and a power-law weight ``theta ~ 1 + Pareto(power - 1)``. Each of
    ``nodes * degree / 2`` undirected edges picks its first end with probability proportional to
    ``theta``; with probability ``homophily`` the second end is drawn (again by ``theta``) from the same
    class, otherwise from the whole graph. Features are ``mu_y + noise * N(0, I)`` with class centroids
    ``mu ~ N(0, I)``, so features alone are informative but neighbourhood averaging helps, and accuracy
    means something. The result is undirected (both directions stored), average in-degree ~ ``degree``.

    Args:
        nodes: number of nodes.
        degree: target average in-degree (after symmetrization; duplicates removed).
        features: feature dimension.
        classes: number of classes.
        homophily: probability that an edge stays within a class.
        power: tail exponent of the degree distribution (larger = more uniform).
        noise: feature noise standard deviation relative to the centroid scale.
        seed: everything is a deterministic function of the seed.
        train, val: fractions of nodes in the train and validation masks (the rest is test).
    """
    if nodes < 2 or degree <= 0 or features < 1 or classes < 2:
        raise ValueError(f"synthetic graph needs nodes>=2, degree>0, features>=1, classes>=2; got "
                         f"nodes={nodes}, degree={degree}, features={features}, classes={classes}")
    if not 0.0 <= homophily <= 1.0:
        raise ValueError(f"homophily must be in [0, 1], got {homophily}")
    rng = np.random.default_rng(seed)
    labels = rng.integers(classes, size=nodes)
    theta = 1.0 + rng.pareto(max(power - 1.0, 0.1), size=nodes)
    theta = np.minimum(theta, nodes / 10.0 + 1.0)
    pairs = int(nodes * degree / 2 * 1.03) + 1  # a little extra for self-loops/duplicates removed below
    cum = np.cumsum(theta)
    first = np.minimum(_sorted_search(cum, rng.random(pairs) * cum[-1]), nodes - 1)
    # second end within the class of the first end: search the class's segment of a class-sorted cumsum
    order = np.argsort(labels, kind="stable")
    cum_sorted = np.cumsum(theta[order])
    counts = np.bincount(labels, minlength=classes)
    seg_end = np.cumsum(counts)
    seg_start = seg_end - counts
    base = np.where(seg_start > 0, cum_sorted[np.maximum(seg_start - 1, 0)], 0.0)
    total = cum_sorted[np.maximum(seg_end - 1, 0)] - base
    c = labels[first]
    pos = _sorted_search(cum_sorted, base[c] + rng.random(pairs) * total[c])
    in_class = order[np.clip(pos, seg_start[c], np.maximum(seg_end[c] - 1, seg_start[c]))]
    anywhere = np.minimum(_sorted_search(cum, rng.random(pairs) * cum[-1]), nodes - 1)
    second = np.where(rng.random(pairs) < homophily, in_class, anywhere)
    src, dst = _clean_edges(first, second, nodes, undirected=True)
    centroids = rng.standard_normal((classes, features))
    x = rng.standard_normal((nodes, features), dtype=np.float32)
    x *= noise
    x += centroids[labels].astype(np.float32)
    train_mask, val_mask, test_mask = _split_masks(nodes, seed, train, val)
    name = f"synthetic-n{nodes}-d{degree:g}-f{features}-c{classes}-s{seed}"
    return Graph(name, nodes, src, dst, x, labels.astype(np.int64),
                 train_mask, val_mask, test_mask, classes)


def npz_graph(path: str, seed: int = 0, train: float = 0.6, val: float = 0.2,
              undirected: bool = True) -> Graph:
    """Cora-style npz: scipy CSR arrays ``adj_{data,indices,indptr,shape}``, ``attr_*`` and ``labels``.

    Row ``i`` of the adjacency lists the neighbours of ``i``; the graph is made undirected by default
    (as PyG's Planetoid datasets are). Features are the dense rows of the attribute matrix.
    """
    import os

    import scipy.sparse as sp

    if not os.path.isfile(path):
        raise FileNotFoundError(f"npz graph file not found: {path!r}")
    with np.load(path, allow_pickle=False) as z:
        missing = [k for k in ("adj_data", "adj_indices", "adj_indptr", "adj_shape", "labels") if k not in z.files]
        if missing:
            raise ValueError(f"{path}: not a Cora-style npz, missing arrays {missing} (found {sorted(z.files)})")
        adj = sp.csr_matrix((z["adj_data"], z["adj_indices"], z["adj_indptr"]), shape=tuple(z["adj_shape"]))
        if "attr_data" in z.files:
            attr = sp.csr_matrix((z["attr_data"], z["attr_indices"], z["attr_indptr"]),
                                 shape=tuple(z["attr_shape"])).toarray()
        elif "attr_matrix" in z.files:
            attr = np.asarray(z["attr_matrix"])
        else:
            raise ValueError(f"{path}: no attribute arrays (attr_data/attr_indices/attr_indptr/attr_shape)")
        labels = np.asarray(z["labels"]).astype(np.int64)
    n = adj.shape[0]
    coo = adj.tocoo()
    src, dst = _clean_edges(coo.row, coo.col, n, undirected=undirected)
    train_mask, val_mask, test_mask = _split_masks(n, seed, train, val)
    name = os.path.splitext(os.path.basename(path))[0]
    return Graph(name, n, src, dst, attr.astype(np.float32), labels, train_mask, val_mask, test_mask,
                 int(labels.max()) + 1)


def ogb_graph(name: str, root: str) -> Graph:
    """OGB node-property dataset from a local folder in OGB layout (never downloads).

    ``root/<name with _ for ->/`` must hold ``RELEASE_v1.txt`` and ``processed/`` (or ``raw/``) as the
    ``ogb`` package leaves them. Uses the dataset's official split.
    """
    import os

    folder = os.path.join(root, name.replace("-", "_"))
    needed = [os.path.join(folder, "RELEASE_v1.txt")]
    missing = [p for p in needed if not os.path.exists(p)]
    if not (os.path.isdir(os.path.join(folder, "processed")) or os.path.isdir(os.path.join(folder, "raw"))):
        missing.append(os.path.join(folder, "processed/ (or raw/)"))
    if missing:
        raise FileNotFoundError(f"OGB dataset {name!r} not found locally (sarlab never downloads); missing: "
                                + ", ".join(missing))
    try:
        from ogb.nodeproppred import NodePropPredDataset
    except ImportError as err:
        raise ImportError("loading OGB datasets needs the 'ogb' package: pip install 'sarlab[ogb]'") from err
    os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    import builtins
    real_input = builtins.input
    builtins.input = lambda *a, **k: "n"  # ogb asks before re-downloading: always answer no
    try:
        dataset = NodePropPredDataset(name=name, root=root)
    finally:
        builtins.input = real_input
    graph, label = dataset[0]
    split = dataset.get_idx_split()
    n = int(graph["num_nodes"])
    masks = []
    for key in ("train", "valid", "test"):
        m = np.zeros(n, dtype=bool)
        m[np.asarray(split[key])] = True
        masks.append(m)
    src, dst = _clean_edges(graph["edge_index"][0], graph["edge_index"][1], n, undirected=True)
    labels = np.asarray(label).reshape(-1)
    labels = np.where(np.isnan(labels), -1, labels).astype(np.int64) if labels.dtype.kind == "f" else labels
    return Graph(name, n, src, dst, np.asarray(graph["node_feat"], dtype=np.float32), labels.astype(np.int64),
                 masks[0], masks[1], masks[2], int(labels.max()) + 1)


def from_pyg(data, name: str = "pyg", seed: int = 0, train: float = 0.6, val: float = 0.2) -> Graph:
    """A PyG ``Data`` object (``x``, ``edge_index``, ``y``; masks used when present)."""
    if getattr(data, "x", None) is None or getattr(data, "y", None) is None:
        raise ValueError("PyG Data needs node features `x` and labels `y`")
    n = int(data.num_nodes)
    ei = data.edge_index.cpu().numpy()
    src, dst = _clean_edges(ei[0], ei[1], n, undirected=False)
    if all(getattr(data, k, None) is not None for k in ("train_mask", "val_mask", "test_mask")):
        masks = tuple(getattr(data, k).cpu().numpy().astype(bool) for k in ("train_mask", "val_mask", "test_mask"))
    else:
        masks = _split_masks(n, seed, train, val)
    y = data.y.cpu().numpy().reshape(-1).astype(np.int64)
    return Graph(name, n, src, dst, data.x.cpu().numpy().astype(np.float32), y, *masks, int(y.max()) + 1)


_SYNTH_TYPES = {"nodes": int, "degree": float, "features": int, "classes": int, "homophily": float,
                "power": float, "noise": float, "seed": int, "train": float, "val": float}


def parse_params(text: str, types: dict[str, type], what: str) -> dict:
    """Parse ``k=v,k=v`` into typed keyword arguments, naming unknown keys."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        if "=" not in item:
            raise ValueError(f"{what}: expected key=value, got {item!r}")
        key, value = (s.strip() for s in item.split("=", 1))
        if key not in types:
            raise ValueError(f"{what}: unknown parameter {key!r}; known: {', '.join(types)}")
        try:
            out[key] = types[key](value)
        except ValueError as err:
            raise ValueError(f"{what}: {key}={value!r} is not a valid {types[key].__name__}") from err
    return out


def load_graph(spec: str) -> Graph:
    """Load a graph from a spec string.

    ``synthetic:nodes=100000,degree=20,features=64,classes=16,seed=0`` (see :func:`synthetic_graph`),
    ``npz:PATH`` (see :func:`npz_graph`), ``ogb:ogbn-arxiv:ROOT`` (see :func:`ogb_graph`).
    """
    kind, _, rest = spec.partition(":")
    if kind == "synthetic":
        return synthetic_graph(**parse_params(rest, _SYNTH_TYPES, "synthetic graph spec"))
    if kind == "npz":
        return npz_graph(rest)
    if kind == "ogb":
        name, _, root = rest.partition(":")
        if not name or not root:
            raise ValueError(f"OGB spec must be ogb:NAME:ROOT, got {spec!r}")
        return ogb_graph(name, root)
    raise ValueError(f"unknown graph spec {spec!r}: use synthetic:k=v,..., npz:PATH, ogb:NAME:ROOT, "
                     "or a partition directory")
