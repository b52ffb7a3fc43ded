"""Graphs from other libraries' objects and from plain arrays: PyG ``Data``, networkx, scipy CSR, Cora-style npz.

Every converter returns a checked :class:`~sarlab.data.graph_data.Graph` (:func:`to_pyg` goes back to a PyG
``Data``). Splits: the train/val/test masks the input carries are kept (:func:`fill_masks` says how a missing
one is filled), and the Graph's ``name`` ends with the split it got, e.g. ``cora [split: stored]`` or
``pyg [split: random, seed 0]``.
"""
from __future__ import annotations

import os

import numpy as np

from sarlab.data.graph_data import Graph, check_fractions, checked, classes_of, clean_edges, split_masks
from sarlab.data.validate_data import InputError, integer_labels

__all__ = ["fill_masks", "from_pyg", "from_networkx", "from_scipy", "read_npz", "to_graph", "to_pyg"]

SPLITS = ("train", "val", "test")


def _as_mask(mask, n: int, what: str, where: str) -> np.ndarray:
    """``mask`` (bool/0-1 array-like or tensor) as a bool array of length ``n``."""
    if hasattr(mask, "detach"):
        mask = mask.detach().cpu().numpy()
    arr = np.asarray(mask)
    if arr.shape != (n,):
        raise InputError(f"{where}: the {what} mask must have one entry per node ({n}), got shape {arr.shape}")
    if arr.dtype != np.bool_:
        if arr.dtype.kind not in "iub" or not np.isin(arr, (0, 1)).all():
            raise InputError(f"{where}: the {what} mask must be boolean (or 0/1), got {arr.dtype}")
        arr = arr.astype(bool)
    return arr


def fill_masks(num_nodes: int, given: dict, seed: int = 0, train: float = 0.6, val: float = 0.2,
               where: str = "graph") -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], str]:
    """The (train, val, test) masks from those ``given`` (``{"train": mask or None, ...}``) and how they were made.

    All three given: kept as they are (``stored``). None given: a random split with fractions ``train`` / ``val``
    / rest (:func:`~sarlab.data.graph_data.split_masks`, ``random, seed S``). Some given: those are kept; the nodes
    in no given mask (the rest) fill the missing ones: one missing mask gets the whole rest; two missing split
    the rest at random (by ``seed``) in the ratio of their default fractions (train ``train``, val ``val``, test
    ``1 - train - val``), e.g. a PyG ``Data`` with only ``train_mask`` gets val : test = 0.2 : 0.2 of the rest.

    Returns:
        ((train, val, test) bool masks, a short description of the split for the graph's name).
    """
    check_fractions(train, val)
    masks = {k: None if given.get(k) is None else _as_mask(given[k], num_nodes, k, where) for k in SPLITS}
    present = [k for k in SPLITS if masks[k] is not None]
    if len(present) == 3:
        return tuple(masks[k] for k in SPLITS), "stored"
    if not present:
        return split_masks(num_nodes, seed, train, val), f"random, seed {seed}"
    missing = [k for k in SPLITS if masks[k] is None]
    rest = ~np.logical_or.reduce([masks[k] for k in present])
    if len(missing) == 1:
        masks[missing[0]] = rest
        how = f"{missing[0]} = the rest"
    else:
        fractions = {"train": train, "val": val, "test": 1.0 - train - val}
        first, second = missing
        total = fractions[first] + fractions[second]
        share = fractions[first] / total if total > 0 else 0.5
        a, b, _ = split_masks(num_nodes, seed, share, 1.0 - share, eligible=rest)
        masks[first], masks[second] = a, b
        how = f"{first}/{second} = the rest split {share:.2g}:{1 - share:.2g} at random, seed {seed}"
    return tuple(masks[k] for k in SPLITS), f"{'+'.join(present)} stored, {how}"


def _graph(name: str, how: str, n: int, src, dst, features, labels, masks) -> Graph:
    return checked(Graph(f"{name} [split: {how}]", n, src, dst, features, labels, *masks, classes_of(labels)))


def _dense_features(features, n: int, where: str) -> np.ndarray:
    """Features as a dense float32 ``[n, F]`` array (scipy sparse, tensors and array-likes accepted)."""
    if hasattr(features, "toarray"):
        features = features.toarray()
    elif hasattr(features, "detach"):
        features = features.detach().cpu().numpy()
    x = np.asarray(features, dtype=np.float32)
    if x.ndim == 1:
        x = x[:, None]
    if x.ndim != 2 or x.shape[0] != n:
        raise InputError(f"{where}: features must be [num_nodes={n}, F], got shape {x.shape}")
    return x


def from_scipy(adj, features, labels, train_mask=None, val_mask=None, test_mask=None, *, name: str = "scipy",
               undirected: bool = True, seed: int = 0, train: float = 0.6, val: float = 0.2) -> Graph:
    """A graph from a scipy sparse adjacency matrix and node arrays.

    Entry ``(i, j)`` of ``adj`` is an edge ``i -> j`` (its value is ignored); with ``undirected`` (the default, as
    PyG's Planetoid graphs are) every edge also gets its reverse. Self-loops and duplicates are dropped.

    Args:
        adj: ``[n, n]`` scipy sparse matrix (any format) or dense array.
        features: ``[n, F]`` dense array, tensor or scipy sparse matrix.
        labels: ``[n]`` integer class ids (``-1``: unlabelled).
        train_mask, val_mask, test_mask: bool ``[n]``; missing ones are filled as :func:`fill_masks` says.
        name: the graph's name (the split is appended).
        seed, train, val: the random split of missing masks.
    """
    import scipy.sparse as sp

    where = f"graph {name!r}"
    coo = sp.coo_matrix(adj)
    if coo.shape[0] != coo.shape[1]:
        raise InputError(f"{where}: the adjacency must be square, got shape {coo.shape}")
    n = int(coo.shape[0])
    src, dst = clean_edges(coo.row, coo.col, n, undirected=undirected)
    y = integer_labels(labels, where)
    if y.shape != (n,):
        raise InputError(f"{where}: {y.shape[0]} labels for {n} nodes")
    masks, how = fill_masks(n, {"train": train_mask, "val": val_mask, "test": test_mask}, seed, train, val, where)
    return _graph(name, how, n, src, dst, _dense_features(features, n, where), y, masks)


def read_npz(path: str) -> dict:
    """The arrays of a Cora-style npz: ``adj`` (scipy CSR), ``features`` (dense), ``labels`` and the masks it
    stores (``train_mask``/``val_mask``/``test_mask``, None when absent)."""
    import scipy.sparse as sp

    if not os.path.isfile(path):
        raise InputError(f"npz graph file not found: {path!r}")
    with np.load(path, allow_pickle=False) as z:
        missing = [k for k in ("adj_data", "adj_indices", "adj_indptr", "adj_shape", "labels") if k not in z.files]
        if missing:
            raise InputError(f"{path}: not a Cora-style npz, missing arrays {missing} (found {sorted(z.files)})")
        adj = sp.csr_matrix((z["adj_data"], z["adj_indices"], z["adj_indptr"]), shape=tuple(z["adj_shape"]))
        if "attr_data" in z.files:
            attr = sp.csr_matrix((z["attr_data"], z["attr_indices"], z["attr_indptr"]),
                                 shape=tuple(z["attr_shape"])).toarray()
        elif "attr_matrix" in z.files:
            attr = np.asarray(z["attr_matrix"])
        else:
            raise InputError(f"{path}: no attribute arrays (attr_data/attr_indices/attr_indptr/attr_shape)")
        out = {"adj": adj, "features": attr, "labels": integer_labels(z["labels"], path)}
        for k in SPLITS:
            out[f"{k}_mask"] = np.asarray(z[f"{k}_mask"]) if f"{k}_mask" in z.files else None
    return out


def from_pyg(data, name: str = "pyg", seed: int = 0, train: float = 0.6, val: float = 0.2) -> Graph:
    """A PyG ``Data`` (``x``, ``edge_index``, ``y``), its ``train_mask``/``val_mask``/``test_mask`` kept.

    Edges are taken as given (``edge_index[0] -> edge_index[1]``, PyG's flow); self-loops and duplicates are
    dropped. Whichever masks the Data has are kept; missing ones are filled as :func:`fill_masks` says (none:
    a random ``train``/``val``/rest split by ``seed``; only ``train_mask``: the other nodes split between val and
    test at random). The Graph's name says which.
    """
    if getattr(data, "x", None) is None or getattr(data, "y", None) is None:
        raise InputError("PyG Data needs node features `x` and labels `y`")
    n = int(data.num_nodes)
    where = f"PyG Data {name!r}"
    ei = data.edge_index.cpu().numpy()
    src, dst = clean_edges(ei[0], ei[1], n, undirected=False)
    y = integer_labels(data.y.cpu().numpy(), where)
    if y.shape != (n,):
        raise InputError(f"{where}: `y` must hold one class id per node ({n}), got {tuple(data.y.shape)}")
    given = {k: getattr(data, f"{k}_mask", None) for k in SPLITS}
    masks, how = fill_masks(n, given, seed, train, val, where)
    return _graph(name, how, n, src, dst, _dense_features(data.x, n, where), y, masks)


def _node_values(G, nodes: list, value, what: str, where: str, optional: bool = False):
    """``value`` if it is an array; else the node attribute it names, read in ``nodes`` order."""
    if value is None or not isinstance(value, str):
        return value
    missing = [v for v in nodes if value not in G.nodes[v]]
    if missing:
        if optional and len(missing) == len(nodes):
            return None
        raise InputError(f"{where}: node {missing[0]!r} has no attribute {value!r} ({what}); give it to every node "
                         "or pass an array")
    return np.asarray([G.nodes[v][value] for v in nodes])


def from_networkx(G, features="x", labels="y", train_mask="train_mask", val_mask="val_mask",
                  test_mask="test_mask", *, name: str = "networkx", seed: int = 0, train: float = 0.6,
                  val: float = 0.2) -> Graph:
    """A graph from a networkx graph: nodes numbered in ``G.nodes`` order, features/labels/masks from node
    attributes or arrays.

    An undirected ``G`` gives both directions of every edge; a directed one its edges ``u -> v`` as they are.
    Self-loops and duplicate edges are dropped. A mask that is an attribute name no node has counts as missing
    and is filled as :func:`fill_masks` says.

    Args:
        G: a ``networkx.Graph`` / ``DiGraph`` (multi-graphs: parallel edges become one).
        features: node attribute name (a vector per node) or an ``[n, F]`` array in ``G.nodes`` order.
        labels: node attribute name (an int per node) or an ``[n]`` array.
        train_mask, val_mask, test_mask: node attribute names (bool per node), ``[n]`` arrays, or None.
        name, seed, train, val: as :func:`from_scipy`.
    """
    try:
        import networkx as nx
    except ImportError as err:
        raise ImportError("from_networkx needs networkx: pip install networkx") from err
    if not isinstance(G, nx.Graph):
        raise InputError(f"from_networkx needs a networkx graph, got {type(G).__name__}")
    where = f"networkx graph {name!r}"
    nodes = list(G.nodes)
    n = len(nodes)
    if n == 0:
        raise InputError(f"{where}: has no nodes")
    index = {v: i for i, v in enumerate(nodes)}
    pairs = np.asarray([(index[u], index[v]) for u, v in G.edges()], dtype=np.int64).reshape(-1, 2)
    src, dst = clean_edges(pairs[:, 0], pairs[:, 1], n, undirected=not G.is_directed())
    x = _node_values(G, nodes, features, "features", where)
    y = _node_values(G, nodes, labels, "labels", where)
    if x is None or y is None:
        raise InputError(f"{where}: needs features and labels (node attribute names or arrays)")
    y = integer_labels(np.asarray(y), where)
    if y.shape != (n,):
        raise InputError(f"{where}: {y.shape[0]} labels for {n} nodes")
    given = {k: _node_values(G, nodes, m, f"{k} mask", where, optional=True)
             for k, m in zip(SPLITS, (train_mask, val_mask, test_mask))}
    masks, how = fill_masks(n, given, seed, train, val, where)
    return _graph(name, how, n, src, dst, _dense_features(x, n, where), y, masks)


def is_pyg_data(obj) -> bool:
    """Whether ``obj`` looks like a PyG ``Data`` (has ``edge_index`` and ``num_nodes``; PyG is not imported)."""
    return hasattr(obj, "edge_index") and hasattr(obj, "num_nodes") and not isinstance(obj, (str, Graph))


def is_networkx(obj) -> bool:
    """Whether ``obj`` is a networkx graph (networkx is imported only if ``obj`` comes from it)."""
    return type(obj).__module__.split(".")[0] == "networkx" and hasattr(obj, "nodes") and hasattr(obj, "edges")


def to_graph(obj) -> Graph:
    """A :class:`Graph` itself, a PyG ``Data`` (:func:`from_pyg`, masks kept) or a networkx graph
    (:func:`from_networkx`, default attribute names) as a Graph."""
    if isinstance(obj, Graph):
        return obj
    if is_pyg_data(obj):
        return from_pyg(obj)
    if is_networkx(obj):
        return from_networkx(obj)
    raise InputError(f"expected a graph spec string, a sarlab Graph, a PyG Data or a networkx graph, got "
                     f"{type(obj).__name__}")


def to_pyg(graph, predictions=None):
    """A PyG ``Data`` of a sarlab graph, optionally with a model's per-node predictions: the way back to PyG.

    ``x`` (float32 features), ``edge_index`` (``[2, E]``, row 0 the sources: PyG's ``source_to_target`` flow), ``y``,
    ``train_mask``/``val_mask``/``test_mask``; a typed graph adds ``edge_type`` and ``node_type``. With
    ``predictions`` (``[num_nodes, C]``, row ``i`` = node ``i``, as :func:`sarlab.run` and :func:`sarlab.predict`
    return them): ``logits`` (as given) and ``pred`` (their argmax). :func:`from_pyg` of the result gives the same
    graph back (its masks stored).

    Args:
        graph: a :class:`Graph`, a PyG ``Data`` or a networkx graph (for a spec string: ``sarlab.load_graph(spec)``).
        predictions: optional ``[num_nodes, C]`` tensor or array.
    """
    import torch
    from torch_geometric.data import Data

    if isinstance(graph, str):
        raise InputError(f"to_pyg takes a graph object; for the spec {graph!r} give sarlab.load_graph({graph!r})")
    g = to_graph(graph)
    data = Data(x=torch.from_numpy(np.ascontiguousarray(g.features)).float(),
                edge_index=torch.from_numpy(np.stack([g.src, g.dst]).astype(np.int64)),
                y=torch.from_numpy(np.asarray(g.labels, dtype=np.int64)), num_nodes=g.num_nodes)
    for split in SPLITS:
        data[f"{split}_mask"] = torch.from_numpy(np.asarray(getattr(g, f"{split}_mask"), dtype=bool))
    if g.typed:
        data.edge_type = torch.from_numpy(np.asarray(g.edge_type, dtype=np.int64))
        data.node_type = torch.from_numpy(np.asarray(g.node_type, dtype=np.int64))
    if predictions is not None:
        logits = torch.as_tensor(predictions.detach() if hasattr(predictions, "detach") else predictions)
        if logits.dim() != 2 or logits.shape[0] != g.num_nodes:
            raise InputError(f"predictions must be [num_nodes={g.num_nodes}, classes], got {tuple(logits.shape)}")
        data.logits, data.pred = logits, logits.argmax(1)
    return data
