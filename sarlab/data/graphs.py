"""Graph sources: synthetic generator, Cora-style npz, the shipped Planetoid datasets, OGB local layout.

One spec string selects a source (see :func:`load_graph`). Every loader checks what it returns with
:func:`sarlab.data.validate_data.check_graph` (NaN/inf features, labels, splits) before anything is computed.
"""
from __future__ import annotations

import builtins
import contextlib
import os
import zipfile

import numpy as np

from sarlab.data import datasets
from sarlab.data.convert import from_pyg, from_scipy, read_npz, to_graph
from sarlab.data.graph_data import Graph, check_fractions, checked, classes_of, clean_edges, parse_params, split_masks
from sarlab.data.hetero import HETERO_TYPES, OGB_HETERO, hetero_graph, ogb_hetero_needed_files, read_ogb_hetero
from sarlab.data.validate_data import InputError, integer_labels

__all__ = ["Graph", "clean_edges", "parse_params", "load_graph", "synthetic_graph", "npz_graph", "ogb_graph",
           "from_pyg", "hetero_graph", "ogb_missing_files", "ogb_needed_files", "check_npz", "npz_sizes"]


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
        raise InputError(f"synthetic graph needs nodes>=2, degree>0, features>=1, classes>=2; got "
                         f"nodes={nodes}, degree={degree}, features={features}, classes={classes}")
    if not 0.0 <= homophily <= 1.0:
        raise InputError(f"homophily must be in [0, 1], got {homophily}")
    check_fractions(train, val)
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
    src, dst = clean_edges(first, second, nodes, undirected=True)
    centroids = rng.standard_normal((classes, features))
    x = rng.standard_normal((nodes, features), dtype=np.float32)
    x *= noise
    x += centroids[labels].astype(np.float32)
    train_mask, val_mask, test_mask = split_masks(nodes, seed, train, val)
    name = f"synthetic-n{nodes}-d{degree:g}-f{features}-c{classes}-s{seed}"
    return checked(Graph(name, nodes, src, dst, x, labels.astype(np.int64), train_mask, val_mask, test_mask,
                          classes))


def npz_graph(path: str, seed: int = 0, train: float = 0.6, val: float = 0.2,
              undirected: bool = True) -> Graph:
    """Cora-style npz: scipy CSR arrays ``adj_{data,indices,indptr,shape}``, ``attr_*``, ``labels`` and, when
    stored, boolean ``train_mask``/``val_mask``/``test_mask``.

    Row ``i`` of the adjacency lists the neighbours of ``i``; the graph is made undirected by default
    (as PyG's Planetoid datasets are). Features are the dense rows of the attribute matrix. The stored masks are
    the split; a file without them gets a random ``train``/``val``/rest split by ``seed`` (partial masks: see
    :func:`~sarlab.data.convert.fill_masks`). The Graph's name says which (``cora [split: stored]``,
    ``cora [split: random, seed 0]``).
    """
    check_fractions(train, val)
    check_npz(path)
    try:
        arrays = read_npz(path)
    except InputError:
        raise
    except (ValueError, IndexError, TypeError, OverflowError) as err:  # what the checks above did not foresee
        raise InputError(f"{path}: not a readable Cora-style npz ({err})") from None
    return from_scipy(arrays["adj"], arrays["features"], arrays["labels"], arrays["train_mask"], arrays["val_mask"],
                      arrays["test_mask"], name=os.path.splitext(os.path.basename(path))[0], undirected=undirected,
                      seed=seed, train=train, val=val)


def npz_headers(path: str) -> dict[str, tuple[tuple, np.dtype]]:
    """``{array: (shape, dtype)}`` of an npz file, read from the array headers without loading any data."""
    if not os.path.isfile(path):
        raise InputError(f"npz graph file not found: {path!r}")
    out = {}
    try:
        with zipfile.ZipFile(path) as z:
            for info in z.infolist():
                with z.open(info) as f:
                    major, _ = np.lib.format.read_magic(f)
                    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
                    shape, _, dtype = read(f)
                out[info.filename.removesuffix(".npy")] = (tuple(shape), dtype)
    except (zipfile.BadZipFile, ValueError, OSError, EOFError) as err:
        raise InputError(f"{path}: not an npz file of numpy arrays ({err}); write it with numpy.savez") from None
    return out


def _npz_small(path: str, name: str) -> np.ndarray:
    with np.load(path, allow_pickle=False) as z:
        return np.asarray(z[name])


def check_npz(path: str) -> dict[str, tuple[tuple, np.dtype]]:
    """Check a Cora-style npz before its arrays are loaded, naming the file and the array at fault: no object or
    string arrays, integer index arrays, an ``adj_shape`` (and ``attr_shape``) that agrees with its row pointer,
    column indices inside the matrix. Returns :func:`npz_headers`."""
    heads = npz_headers(path)
    for name, (_shape, dtype) in heads.items():
        if dtype.hasobject:
            raise InputError(f"{path}: array {name!r} holds Python objects (dtype object); sarlab reads plain "
                             "numeric arrays only: save it with a numeric dtype")
        if dtype.kind in "USV" and name != "format":
            raise InputError(f"{path}: array {name!r} holds {'strings' if dtype.kind in 'US' else 'raw bytes'} "
                             f"(dtype {dtype}); sarlab needs numbers: convert it to a numeric dtype")
    for prefix in ("adj", "attr"):
        if f"{prefix}_shape" not in heads or f"{prefix}_indptr" not in heads:
            continue
        shape = _npz_small(path, f"{prefix}_shape") if heads[f"{prefix}_shape"][0] in ((2,),) else None
        if shape is None or shape.dtype.kind not in "iu" or (shape < 0).any():
            raise InputError(f"{path}: array '{prefix}_shape' must be two non-negative integers (rows, columns), "
                             f"got shape {heads[f'{prefix}_shape'][0]}")
        rows, cols = int(shape[0]), int(shape[1])
        ptr = heads[f"{prefix}_indptr"][0]
        if ptr != (rows + 1,):
            raise InputError(f"{path}: array '{prefix}_shape' says {rows} rows but '{prefix}_indptr' has "
                             f"{ptr[0] if ptr else 0} entries ({rows + 1} expected); fix the shape or the matrix")
        for key in (f"{prefix}_indices", f"{prefix}_indptr"):
            if key in heads and heads[key][1].kind not in "iu":
                raise InputError(f"{path}: array {key!r} must hold integers, got dtype {heads[key][1]}")
        if f"{prefix}_indices" in heads and heads[f"{prefix}_indices"][0][0:1] != (0,):
            idx = _npz_small(path, f"{prefix}_indices")
            if idx.min() < 0 or idx.max() >= cols:
                bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
                raise InputError(f"{path}: array '{prefix}_indices' holds {bad}, outside the {cols} columns that "
                                 f"'{prefix}_shape' declares; fix the index or the shape")
    if "adj_shape" in heads and "adj_indptr" in heads:
        rows, cols = (int(v) for v in _npz_small(path, "adj_shape"))
        if rows != cols:
            raise InputError(f"{path}: array 'adj_shape' is {rows} x {cols}; an adjacency matrix is square")
    return heads


def npz_sizes(path: str) -> dict:
    """``nodes``, ``edges`` (made undirected), ``features`` and ``classes`` (not read: 16) a Cora-style npz declares,
    from its headers (:func:`check_npz`), before any array is loaded."""
    heads = check_npz(path)
    if "adj_shape" not in heads or "adj_data" not in heads:
        return None
    nodes = int(_npz_small(path, "adj_shape")[0])
    if "attr_shape" in heads:
        features = int(_npz_small(path, "attr_shape")[1])
    else:
        shape = heads.get("attr_matrix", ((0, 0), None))[0]
        features = int(shape[1]) if len(shape) == 2 else 1
    return {"nodes": nodes, "edges": 2 * int(np.prod(heads["adj_data"][0])), "features": features, "classes": 16}


def ogb_needed_files(meta: dict) -> tuple[list[str], list[str], list[str], str]:
    """Files (relative to the dataset folder) ``ogb`` reads to load a dataset without downloading anything:
    (release marker, raw files + cache folder, split files, the split cache that replaces them).

    ``meta`` is the dataset's column of ogb's ``nodeproppred/master.csv``. ``ogb`` downloads (and replaces the
    folder) when ``raw/edge.csv.gz`` (``raw/data.npz`` for binary datasets) is missing and there is no
    ``processed/data_processed``; it offers to delete the folder when ``RELEASE_v<version>.txt`` is missing.
    Without ``processed/data_processed`` it parses ``raw/`` and writes its cache into ``processed/``.
    """
    need = [f"RELEASE_v{meta['version']}.txt"]
    split = f"split/{meta['split']}"
    splits = [f"{split}/{k}.csv.gz" for k in ("train", "valid", "test")]
    if meta["binary"] == "True":
        raw = ["raw/data.npz", "raw/node-label.npz"]
    else:
        raw = ["raw/edge.csv.gz", "raw/num-node-list.csv.gz", "raw/num-edge-list.csv.gz", "raw/node-label.csv.gz",
               "raw/node-feat.csv.gz"]
        for key in ("additional node files", "additional edge files"):
            raw += [f"raw/{f}.csv.gz" for f in meta[key].split(",") if meta[key] != "None"]
    return need, raw + ["processed/"], splits, f"{split}/split_dict.pt"


def ogb_missing_files(folder: str, meta: dict) -> list[str]:
    """The files of :func:`ogb_needed_files` that ``folder`` lacks (empty: ``ogb`` will not download).

    For a heterogeneous dataset (``meta["is hetero"]``), which sarlab reads from the raw CSVs itself, the files
    of :func:`~sarlab.data.hetero.ogb_hetero_needed_files`.
    """
    if meta.get("is hetero") == "True":
        return [f for f in ogb_hetero_needed_files(meta) if not os.path.exists(os.path.join(folder, f))]
    release, raw, splits, split_dict = ogb_needed_files(meta)
    need = list(release)
    if not os.path.isfile(os.path.join(folder, "processed", "data_processed")):
        need += raw
    if not os.path.isfile(os.path.join(folder, split_dict)):
        need += splits
    return [f for f in need if not os.path.exists(os.path.join(folder, f))]


@contextlib.contextmanager
def _no_download(dataset_module):
    """While loading: ogb's download decision always says no (and raises) and its prompts are answered no."""
    def refuse(url, *args, **kwargs):
        raise InputError(f"ogb wanted to download {url}; sarlab never downloads (fetch the dataset yourself)")

    real_input, real_decide = builtins.input, dataset_module.decide_download
    builtins.input = lambda *a, **k: "n"
    dataset_module.decide_download = refuse
    try:
        yield
    finally:
        builtins.input, dataset_module.decide_download = real_input, real_decide


def ogb_graph(name: str, root: str, reverse: bool = False) -> Graph:
    """OGB node-property dataset from a local folder in OGB layout (never downloads).

    ``root/<name with _ for ->/`` must hold what :func:`ogb_needed_files` lists, as the ``ogb`` package
    leaves it after a download; a missing file is named before ``ogb`` is called. Uses the official split.
    The heterogeneous ogbn-mag is read from its raw CSVs by :func:`~sarlab.data.hetero.read_ogb_hetero` (no ``ogb``
    package needed; ``reverse`` adds every relation's reverse); other datasets go through ``ogb``.
    """
    folder = os.path.join(root, name.replace("-", "_"))
    if not os.path.isdir(root):
        raise InputError(f"OGB root: no such directory {root!r} (spec ogb:NAME:ROOT; sarlab never downloads)")
    if not os.path.isdir(folder):
        raise InputError(f"OGB dataset {name!r}: no such directory {folder!r}; sarlab never downloads: place the "
                         f"dataset there as the ogb package lays it out")
    if name in OGB_HETERO:
        missing = ogb_missing_files(folder, OGB_HETERO[name])
        if missing:
            raise InputError(f"OGB dataset {name!r} in {folder} is incomplete (sarlab never downloads); missing: "
                             f"{', '.join(missing)}")
        return read_ogb_hetero(folder, name, OGB_HETERO[name], reverse)
    try:
        import ogb.nodeproppred.dataset as ogb_dataset
        import pandas as pd
    except ImportError as err:
        raise ImportError("loading OGB datasets needs the 'ogb' package: pip install 'sarlab[ogb]'") from err
    master = pd.read_csv(os.path.join(os.path.dirname(ogb_dataset.__file__), "master.csv"), index_col=0,
                         keep_default_na=False)
    if name not in master:
        raise InputError(f"unknown OGB node dataset {name!r}; ogb knows {', '.join(master.columns)}")
    meta = master[name].to_dict()
    if meta["is hetero"] == "True" or int(meta["num tasks"]) != 1 or meta["has_node_attr"] != "True":
        raise InputError(f"OGB dataset {name!r} is heterogeneous, multi-task or has no node features; sarlab "
                         "trains single-label node classification on homogeneous graphs with node features")
    missing = ogb_missing_files(folder, meta)
    if missing:
        raise InputError(f"OGB dataset {name!r} in {folder} is incomplete, and ogb would try to download it "
                         f"(sarlab never downloads); missing: {', '.join(missing)}")
    import torch

    try:  # ogb's cache (processed/data_processed) holds numpy arrays: allow exactly those, weights-only stays on
        from numpy._core.multiarray import _reconstruct
    except ImportError:  # numpy < 2
        from numpy.core.multiarray import _reconstruct
    arrays = [np.ndarray, np.dtype, _reconstruct] + [type(np.dtype(t)) for t in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64")]
    with _no_download(ogb_dataset), torch.serialization.safe_globals(arrays):
        dataset = ogb_dataset.NodePropPredDataset(name=name, root=root)
        graph, label = dataset[0]
        split = dataset.get_idx_split()
    n = int(graph["num_nodes"])
    if graph.get("node_feat") is None:
        raise InputError(f"OGB dataset {name!r} in {folder}: no node features (raw/node-feat.csv.gz was missing "
                         "when ogb built processed/data_processed); restore it and delete that cache file")
    masks = []
    for key in ("train", "valid", "test"):
        m = np.zeros(n, dtype=bool)
        m[np.asarray(split[key])] = True
        masks.append(m)
    src, dst = clean_edges(graph["edge_index"][0], graph["edge_index"][1], n, undirected=True)
    labels = integer_labels(np.asarray(label).reshape(-1), f"OGB dataset {name!r}")
    return checked(Graph(name, n, src, dst, np.asarray(graph["node_feat"], dtype=np.float32), labels,
                          masks[0], masks[1], masks[2], classes_of(labels)))


_SYNTH_TYPES = {"nodes": int, "degree": float, "features": int, "classes": int, "homophily": float,
                "power": float, "noise": float, "seed": int, "train": float, "val": float}


def load_graph(spec) -> Graph:
    """Load a graph from a spec string (or convert a Graph, PyG ``Data`` or networkx graph: see
    :func:`~sarlab.data.convert.to_graph`).

    ``synthetic:nodes=100000,degree=20,features=64,classes=16,seed=0`` (see :func:`synthetic_graph`),
    ``npz:PATH`` (see :func:`npz_graph`), ``planetoid:cora`` / ``planetoid:citeseer`` (shipped, public split: see
    :mod:`sarlab.data.datasets`), ``ogb:ogbn-arxiv:ROOT`` (see :func:`ogb_graph`; ``ogb:ogbn-mag+rev:ROOT``
    adds the reverse relations), ``hetero:nodes=20000,seed=0`` (see :func:`~sarlab.data.hetero.hetero_graph`).
    """
    if not isinstance(spec, str):
        return to_graph(spec)
    kind, _, rest = spec.partition(":")
    if kind == "synthetic":
        return synthetic_graph(**parse_params(rest, _SYNTH_TYPES, "synthetic graph spec"))
    if kind == "hetero":
        return hetero_graph(**parse_params(rest, HETERO_TYPES, "hetero graph spec"))
    if kind == "npz":
        return npz_graph(rest)
    if kind == "planetoid":
        return datasets.load(rest)
    if kind == "ogb":
        name, _, root = rest.partition(":")
        if not name or not root:
            raise InputError(f"OGB spec must be ogb:NAME:ROOT, got {spec!r}")
        name, plus, option = name.partition("+")
        if plus and (option != "rev" or name not in OGB_HETERO):
            raise InputError(f"OGB spec {spec!r}: +{option} is not an option of {name} (only a heterogeneous dataset "
                             f"takes +rev: {', '.join(OGB_HETERO)})")
        return ogb_graph(name, root, reverse=bool(plus))
    if os.path.isfile(os.path.join(spec, "manifest.json")):
        raise InputError(f"{spec!r} is a sarlab partition directory, not a graph: give the graph it was made from "
                         "(see its manifest.json, field 'source')")
    if os.path.isdir(spec):
        raise InputError(f"{spec!r} is a directory but not a partition directory (it has no manifest.json); "
                         "create one with `sarlab partition`")
    if os.path.exists(spec):
        raise InputError(f"{spec!r} is a file, not a graph spec; for a Cora-style file write npz:{spec}")
    if kind == spec or os.sep in spec or spec.startswith((".", "~")):
        raise InputError(f"no such directory: {spec!r} (a graph spec is synthetic:k=v,..., hetero:k=v,..., "
                         "npz:PATH, planetoid:cora|citeseer, ogb:NAME:ROOT, or an existing partition directory)")
    raise InputError(f"unknown graph spec {spec!r}: use synthetic:k=v,..., hetero:k=v,..., npz:PATH, "
                     "planetoid:cora|citeseer, ogb:NAME:ROOT, "
                     "or a partition directory")
