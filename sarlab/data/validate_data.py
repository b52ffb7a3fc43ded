"""Checks of a graph and of a partition's arrays before any compute: one clear line per problem.

Everything here raises :class:`InputError` (a ``ValueError``) naming what is wrong and how to fix it; the
command line turns it into ``error: ...`` and exit code 2. The checks read arrays only (a graph or a part is
duck-typed), so this module imports nothing from the engine and every loader can call it.
"""
from __future__ import annotations

import math
import numbers
import re

import numpy as np

#: an outlier label makes a model with this many more classes than the labels use: refused as absurd
MAX_UNUSED_CLASSES = 16
#: rows per block when scanning features for NaN/inf (bounds the temporary mask's memory)
_ROW_BLOCK = 1 << 16


class InputError(ValueError):
    """The user's data or arguments are wrong (not a bug, not a fault of the machine): exit code 2."""


def check_int(name: str, value, minimum: int) -> None:
    """``value`` is an integer (not a bool) >= ``minimum``, else one line saying so."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_real(name: str, value, minimum: float, inclusive: bool = True, below: float | None = None) -> None:
    """``value`` is a finite number >= ``minimum`` (> when not ``inclusive``) and < ``below`` if given."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value) \
        and (value >= minimum if inclusive else value > minimum) and (below is None or value < below)
    if not ok:
        bound = f"{'>=' if inclusive else '>'} {minimum:g}" + (f" and < {below:g}" if below is not None else "")
        raise InputError(f"{name} must be a finite number {bound}, got {value!r}")


def check_finite_features(features: np.ndarray, where: str, node_ids: np.ndarray | None = None) -> None:
    """Features are a 2-D floating array with no NaN or infinity (scanned in row blocks).

    Args:
        features: ``[rows, F]``.
        where: what the array belongs to, for the message.
        node_ids: the original node id of each row (named in the message), default the row number.
    """
    if features.ndim != 2 or features.shape[1] < 1:
        raise InputError(f"{where}: features must be a [nodes, features] array with >= 1 feature, "
                         f"got shape {tuple(features.shape)}")
    if features.dtype.kind != "f":
        raise InputError(f"{where}: features must be floating point, got dtype {features.dtype}")
    bad_rows, first = 0, None
    for lo in range(0, features.shape[0], _ROW_BLOCK):
        block = features[lo:lo + _ROW_BLOCK]
        ok = np.isfinite(block).all(axis=1)
        if not ok.all():
            rows = np.flatnonzero(~ok)
            bad_rows += int(rows.size)
            if first is None:
                col = int(np.flatnonzero(~np.isfinite(block[rows[0]]))[0])
                first = (lo + int(rows[0]), col, block[rows[0], col])
    if first is not None:
        row, col, value = first
        node = int(node_ids[row]) if node_ids is not None else row
        raise InputError(f"{where}: {bad_rows} node(s) have NaN or infinite features (first: node {node}, "
                         f"feature {col} = {value}); clean or impute them before training")


def integer_labels(labels: np.ndarray, where: str) -> np.ndarray:
    """Labels as int64 class ids: integer arrays pass, whole-valued floats are converted, NaN becomes -1
    (unlabelled); a fractional label is refused rather than truncated."""
    labels = np.asarray(labels).reshape(-1)
    if labels.dtype.kind in "iub":
        return labels.astype(np.int64)
    if labels.dtype.kind != "f":
        raise InputError(f"{where}: labels must be integer class ids, got dtype {labels.dtype}")
    known = ~np.isnan(labels)
    fractional = known & (np.floor(np.where(known, labels, 0.0)) != np.where(known, labels, 0.0))
    if fractional.any():
        node = int(np.flatnonzero(fractional)[0])
        raise InputError(f"{where}: labels must be integer class ids, but {int(fractional.sum())} are fractional "
                         f"(first: node {node} has label {labels[node]}); class ids are 0, 1, ..., C-1")
    return np.where(known, labels, -1).astype(np.int64)


def check_labels(labels: np.ndarray, masks: dict, num_classes: int, where: str,
                 node_ids: np.ndarray | None = None) -> None:
    """Labels fit the class count: ``-1`` (unlabelled) or ``0..C-1``; every node of a split is labelled.

    Args:
        labels: int ``[rows]``.
        masks: ``{"train": bool [rows], "val": ..., "test": ...}``.
        num_classes: ``C``, the model's output size.
        where: for the message.
        node_ids: original node id of each row (named in messages), default the row number.
    """
    if labels.dtype.kind not in "iu":
        raise InputError(f"{where}: labels must be integer class ids, got dtype {labels.dtype}")
    if num_classes < 2:
        raise InputError(f"{where}: {num_classes} class(es); classification needs at least 2")

    def node(row: int) -> int:
        return int(node_ids[row]) if node_ids is not None else int(row)

    if labels.size and labels.min() < -1:
        row = int(np.argmin(labels))
        raise InputError(f"{where}: label {int(labels[row])} of node {node(row)} is negative; class ids are "
                         f"0..{num_classes - 1} (-1 marks an unlabelled node outside the splits)")
    if labels.size and labels.max() >= num_classes:
        row = int(np.argmax(labels))
        raise InputError(f"{where}: label {int(labels[row])} of node {node(row)} is out of range for "
                         f"{num_classes} classes (0..{num_classes - 1})")
    for split, mask in masks.items():
        unlabelled = mask & (labels < 0)
        if unlabelled.any():
            raise InputError(f"{where}: {int(unlabelled.sum())} node(s) of the {split} split have no label (-1), "
                             f"first: node {node(int(np.flatnonzero(unlabelled)[0]))}; drop them from the split")


def check_class_count(labels: np.ndarray, num_classes: int, where: str) -> None:
    """Refuse a class count that one outlier label has inflated (e.g. 7 classes used, label 100000).

    Absurd means more than ``max(MAX_UNUSED_CLASSES, classes used)`` classes without a single node.
    """
    used = np.unique(labels[labels >= 0])
    unused = num_classes - int(used.size)
    if unused > max(MAX_UNUSED_CLASSES, int(used.size)):
        top = used[-3:][::-1].tolist()
        raise InputError(f"{where}: the labels use {used.size} distinct classes but the largest label is "
                         f"{int(used[-1]) if used.size else -1}, which makes a {num_classes}-class model with "
                         f"{unused} empty classes; largest labels {top}: fix the outlier label(s) or renumber the "
                         "classes 0..C-1")


def check_manifest_classes(labels: np.ndarray, manifest: dict, where: str) -> None:
    """A partition's ``num_classes`` is the one its labels make (largest label + 1), as sarlab wrote it; a larger
    count is kept only where the source spec asked for it (``synthetic:...,classes=C`` whose top classes drew no
    node), so a consistent hand edit of the manifest cannot make a model with classes no node has.

    Args:
        labels: the distinct labels of every part. manifest: the partition's manifest. where: its path.
    """
    num_classes = int(manifest["num_classes"])
    check_class_count(labels, num_classes, where)
    made = int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 0
    declared = (f"classes={num_classes}" in re.split(r"[:,\s]+", str(manifest.get("source", "")))
                or re.search(rf"-c{num_classes}(-|$)", str(manifest.get("graph", ""))) is not None)  # synthetic names
    if num_classes != made and not (num_classes > made and declared):
        raise InputError(f"{where}: manifest.json says num_classes {num_classes} but the labels make {made} "
                         f"(largest label {made - 1}); the manifest was edited: re-create the partition")


def check_edges(src: np.ndarray, dst: np.ndarray, num_nodes: int, where: str) -> None:
    """Edge endpoints are integer node ids in ``[0, num_nodes)``."""
    if src.shape != dst.shape or src.ndim != 1:
        raise InputError(f"{where}: edge sources and destinations must be two 1-D arrays of one length, got "
                         f"shapes {tuple(src.shape)} and {tuple(dst.shape)}")
    for name, ends in (("source", src), ("destination", dst)):
        if ends.dtype.kind not in "iu":
            raise InputError(f"{where}: edge {name}s must be integer node ids, got dtype {ends.dtype}")
        if ends.size and (ends.min() < 0 or ends.max() >= num_nodes):
            bad = int(ends.min()) if ends.min() < 0 else int(ends.max())
            raise InputError(f"{where}: edge {name} {bad} is not a node id (the graph has {num_nodes} nodes, "
                             f"ids 0..{num_nodes - 1})")


def check_graph(graph) -> None:
    """Everything a whole :class:`~sarlab.data.graphs.Graph` must satisfy before it is partitioned or trained on."""
    where = f"graph {graph.name!r}"
    n = int(graph.num_nodes)
    if n < 1:
        raise InputError(f"{where}: has no nodes")
    check_edges(graph.src, graph.dst, n, where)
    if graph.features.shape[:1] != (n,):
        raise InputError(f"{where}: {graph.features.shape[0]} feature rows for {n} nodes")
    check_finite_features(graph.features, where)
    masks = {"train": graph.train_mask, "val": graph.val_mask, "test": graph.test_mask}
    for split, mask in masks.items():
        if mask.shape != (n,) or mask.dtype != np.bool_:
            raise InputError(f"{where}: the {split} mask must be bool of length {n}, got {mask.dtype} "
                             f"{tuple(mask.shape)}")
    if graph.labels.shape != (n,):
        raise InputError(f"{where}: {graph.labels.shape[0]} labels for {n} nodes")
    check_labels(graph.labels, masks, int(graph.num_classes), where)
    check_class_count(graph.labels, int(graph.num_classes), where)
    if not graph.train_mask.any():
        raise InputError(f"{where}: the train split is empty (no node in train_mask); nothing to train on")
    check_graph_types(graph, where)


def check_type_ids(ids, count: int, length: int, what: str, where: str) -> None:
    """``ids`` is a 1-D integer array of ``length`` type ids in ``[0, count)``."""
    if ids is None or ids.shape != (length,) or ids.dtype.kind not in "iu":
        shape = None if ids is None else (ids.dtype, tuple(ids.shape))
        raise InputError(f"{where}: {what} must be an integer array of length {length}, got {shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= count):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise InputError(f"{where}: {what} {bad} is out of range: there are {count} ({what} 0..{count - 1})")


def check_graph_types(graph, where: str) -> None:
    """A typed graph's node and edge types: one per node and per edge, each naming one of its types."""
    node_type, edge_type = getattr(graph, "node_type", None), getattr(graph, "edge_type", None)
    if node_type is None and edge_type is None:
        return
    if node_type is None or edge_type is None:
        raise InputError(f"{where}: a typed graph needs both node_type and edge_type (got only one)")
    names, relations = tuple(graph.node_type_names), tuple(graph.relation_names)
    if not names or not relations or len(set(names)) != len(names) or len(set(relations)) != len(relations):
        raise InputError(f"{where}: a typed graph needs distinct node type names and relation names, got "
                         f"{names} and {relations}")
    check_type_ids(node_type, len(names), int(graph.num_nodes), "node type", where)
    check_type_ids(edge_type, len(relations), int(graph.src.shape[0]), "relation", where)


def check_manifest_fields(manifest: dict, part_arrays: tuple[str, ...], where: str) -> None:
    """A partition manifest's fields are present, of the right kind, and consistent with each other."""
    need = {"num_parts": int, "num_nodes": int, "num_edges": int, "feature_dim": int, "num_classes": int,
            "train_nodes": int, "node_ranges": list, "edges_per_shard": list, "halo_rows": list, "files": dict}
    for key, kind in need.items():
        if not isinstance(manifest.get(key), kind) or isinstance(manifest.get(key), bool):
            raise InputError(f"{where}: field {key!r} is missing or not a {kind.__name__}; re-create the partition")
    p, n = manifest["num_parts"], manifest["num_nodes"]
    if p < 1 or n < p:
        raise InputError(f"{where}: {p} parts of {n} nodes is impossible; re-create the partition")
    ranges = manifest["node_ranges"]
    flat = [v for r in ranges for v in (r if isinstance(r, list) and len(r) == 2 else [None, None])]
    if len(ranges) != p or not all(isinstance(v, int) for v in flat):
        raise InputError(f"{where}: node_ranges must list {p} [start, end) pairs; re-create the partition")
    bounds = [0] + [end for _, end in ranges]
    if [s for s, _ in ranges] != bounds[:-1] or bounds[-1] != n or any(e <= s for s, e in ranges):
        raise InputError(f"{where}: node_ranges {ranges} do not split 0..{n} into consecutive non-empty ranges; "
                         "re-create the partition")
    for key in ("edges_per_shard", "halo_rows"):
        table = np.asarray(manifest[key], dtype=object)
        if table.shape != (p, p) or not all(isinstance(v, int) and v >= 0 for v in table.reshape(-1)):
            raise InputError(f"{where}: {key} must be a {p}x{p} table of counts; re-create the partition")
    if sum(map(sum, manifest["edges_per_shard"])) != manifest["num_edges"]:
        raise InputError(f"{where}: edges_per_shard adds up to {sum(map(sum, manifest['edges_per_shard']))} "
                         f"but num_edges is {manifest['num_edges']}; re-create the partition")
    if manifest["feature_dim"] < 1:
        raise InputError(f"{where}: feature_dim {manifest['feature_dim']} must be >= 1")
    if manifest["num_classes"] < 2:
        raise InputError(f"{where}: num_classes {manifest['num_classes']}; classification needs at least 2")
    if not 0 < manifest["train_nodes"] <= n:
        raise InputError(f"{where}: train_nodes {manifest['train_nodes']} must be in 1..{n} (an empty train split "
                         "has nothing to train on)")
    if "num_relations" in manifest:
        check_typed_manifest(manifest, where)
        part_arrays = tuple(part_arrays) + ("node_type", "edge_type")
    missing = [f"part{q}/{a}.npy" for q in range(p) for a in part_arrays
               if f"part{q}/{a}.npy" not in manifest["files"]]
    if missing:
        raise InputError(f"{where}: lists no checksum for {missing[:3]}{' ...' if len(missing) > 3 else ''}; "
                         "re-create the partition")


def check_typed_manifest(manifest: dict, where: str) -> None:
    """The type fields of a typed partition's manifest: counts, names and per-relation edge counts agree."""
    rel, names = manifest.get("num_relations"), manifest.get("relation_names")
    types, type_names = manifest.get("num_node_types"), manifest.get("node_type_names")
    per_rel = manifest.get("edges_per_relation")
    ok = isinstance(rel, int) and not isinstance(rel, bool) and rel >= 1 and isinstance(types, int) \
        and types >= 1 and isinstance(names, list) and len(names) == rel and isinstance(type_names, list) \
        and len(type_names) == types and isinstance(per_rel, list) and len(per_rel) == rel \
        and all(isinstance(v, int) and v >= 0 for v in per_rel)
    if not ok:
        raise InputError(f"{where}: the type fields (num_relations, relation_names, num_node_types, node_type_names, "
                         "edges_per_relation) are missing or inconsistent; re-create the partition")
    if sum(per_rel) != manifest["num_edges"]:
        raise InputError(f"{where}: edges_per_relation adds up to {sum(per_rel)} but num_edges is "
                         f"{manifest['num_edges']}; re-create the partition")


def check_part_arrays(arrays: dict, manifest: dict, part: int, where: str) -> None:
    """One part's arrays agree with the manifest and with each other (shapes, dtypes, index ranges, labels)."""
    p = manifest["num_parts"]
    start, end = manifest["node_ranges"][part]
    rows = end - start

    def fail(what: str) -> None:
        raise InputError(f"{where}: {what}; the partition does not match its manifest (re-create it)")

    a = arrays
    if a["features"].ndim != 2 or a["features"].shape != (rows, manifest["feature_dim"]):
        fail(f"features have shape {tuple(a['features'].shape)}, the manifest says {rows} rows x "
             f"{manifest['feature_dim']} features")
    for key in ("labels", "train_mask", "val_mask", "test_mask", "orig_ids"):
        if a[key].shape != (rows,):
            fail(f"{key} has shape {tuple(a[key].shape)}, the manifest says {rows} nodes")
    for key in ("train_mask", "val_mask", "test_mask"):
        if a[key].dtype != np.bool_:
            fail(f"{key} has dtype {a[key].dtype}, expected bool")
    for key in ("orig_ids", "edge_src", "edge_dst", "edge_ptr", "recv_rows", "recv_ptr", "send_rows", "send_ptr"):
        if a[key].dtype.kind not in "iu" or a[key].ndim != 1:
            fail(f"{key} must be a 1-D integer array, got {a[key].dtype} {tuple(a[key].shape)}")
    if rows and (a["orig_ids"].min() < 0 or a["orig_ids"].max() >= manifest["num_nodes"]):
        fail(f"orig_ids reach outside 0..{manifest['num_nodes'] - 1}")
    edges = manifest["edges_per_shard"][part]
    if a["edge_ptr"].shape != (p + 1,) or np.diff(a["edge_ptr"]).tolist() != list(edges) \
            or a["edge_src"].shape != a["edge_dst"].shape or int(a["edge_ptr"][-1]) != a["edge_src"].shape[0]:
        fail(f"edge arrays hold {a['edge_src'].shape[0]} edges in shards {np.diff(a['edge_ptr']).tolist()}, the "
             f"manifest says {edges}")
    halo = manifest["halo_rows"][part]
    for key in ("recv_ptr", "send_ptr"):
        if a[key].shape != (p + 1,) or a[key][0] != 0 or (np.diff(a[key]) < 0).any():
            fail(f"{key} must be {p + 1} non-decreasing offsets from 0")
    if np.diff(a["recv_ptr"]).tolist() != list(halo) or int(a["recv_ptr"][-1]) != a["recv_rows"].shape[0]:
        fail(f"receives {np.diff(a['recv_ptr']).tolist()} halo rows per peer, the manifest says {halo}")
    if int(a["send_ptr"][-1]) != a["send_rows"].shape[0]:
        fail("send_ptr does not cover send_rows")
    if a["edge_dst"].size and (a["edge_dst"].min() < 0 or a["edge_dst"].max() >= rows):
        fail(f"an edge destination lies outside the part's {rows} rows")
    for q in range(p):
        lo, hi = int(a["edge_ptr"][q]), int(a["edge_ptr"][q + 1])
        width = rows if q == part else int(a["recv_ptr"][q + 1] - a["recv_ptr"][q])
        if hi > lo and (a["edge_src"][lo:hi].min() < 0 or a["edge_src"][lo:hi].max() >= width):
            fail(f"an edge source of shard {q} lies outside its {width} rows")
    for key in ("recv_rows", "send_rows"):
        if a[key].size and a[key].min() < 0:
            fail(f"{key} holds a negative row")
    if a["send_rows"].size and a["send_rows"].max() >= rows:
        fail(f"send_rows reach past the part's {rows} rows")
    if "num_relations" in manifest:
        try:
            check_type_ids(a.get("node_type"), manifest["num_node_types"], rows, "node type", where)
            check_type_ids(a.get("edge_type"), manifest["num_relations"], a["edge_src"].shape[0], "relation", where)
        except InputError as err:
            fail(str(err).removeprefix(f"{where}: "))
    check_finite_features(a["features"], where, a["orig_ids"])
    masks = {k: a[f"{k}_mask"] for k in ("train", "val", "test")}
    check_labels(a["labels"], masks, manifest["num_classes"], where, a["orig_ids"])
