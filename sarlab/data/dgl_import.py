"""DGL partitions in: turn the output of DGL's ``partition_graph`` into a sarlab partition directory.

DGL writes ``PART_CONFIG.json`` (graph name, node and edge counts, ``node_map``: the contiguous range of
reshuffled node ids each part owns) and per part ``graph.dgl`` (the part's local graph: owned nodes, halo
nodes, their global ids in ``ndata["_ID"]``, ``inner_node``/``inner_edge`` flags) and ``node_feat.dgl``
(``"_N/<name>"`` tensors, one row per owned node in id order). Those two files are DGL's own binary formats,
so reading them needs DGL itself (the ``dgl`` extra); everything after the read is numpy.

The owned edges of all parts together are the graph. Converted with DGL's own assignment, sarlab part ``p``
owns exactly DGL part ``p``'s nodes. Node ids are DGL's reshuffled ones unless the ``orig_nids`` that
``partition_graph(..., return_mapping=True)`` returned are given: then rows, predictions and dropout keys
use the graph's original ids.
"""
from __future__ import annotations

import json
import os
from typing import NamedTuple

import numpy as np
import torch

from sarlab.data.graphs import Graph, clean_edges, parse_params
from sarlab.data.partition import check_output_dir, write_partition
from sarlab.data.validate_data import InputError, integer_labels

#: array name -> names tried in DGL's node data, first found wins (override with ``keys``)
DEFAULT_KEYS = {"features": ("feat", "features", "x"), "labels": ("label", "labels", "y"),
                "train": ("train_mask",), "val": ("val_mask", "valid_mask"), "test": ("test_mask",)}
DGL_HELP = ("DGL's graph.dgl and node_feat.dgl are DGL's own binary formats, so DGL must be installed to read "
            "them: pip install 'sarlab[dgl]'. DGL 1.1.3 imports beside torch 2.13 only with numpy<2, e.g. pip "
            "install --target DIR 'dgl==1.1.3' 'numpy<2' 'setuptools<71' --no-deps, then run with PYTHONPATH=DIR")


class DGLPart(NamedTuple):
    """One DGL part as numpy arrays: its local graph and the node data of the nodes it owns."""

    global_ids: np.ndarray  # int64 [local nodes]: reshuffled global id of each local node
    inner_node: np.ndarray  # bool [local nodes]: owned by this part (the rest are halo copies)
    src: np.ndarray  # int64 [local edges], local node ids
    dst: np.ndarray  # int64 [local edges]
    inner_edge: np.ndarray  # bool [local edges]: owned by this part
    node_data: dict  # name (without "_N/") -> array, one row per owned node in global id order


def read_config(part_config: str) -> dict:
    """DGL's partition config, checked for what a homogeneous, reshuffled partition must have."""
    if not os.path.isfile(part_config):
        raise InputError(f"DGL partition config not found: {part_config!r} (the JSON that partition_graph wrote)")
    try:
        with open(part_config) as f:
            config = json.load(f)
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"{part_config} is not valid JSON ({err})") from err
    missing = [k for k in ("graph_name", "num_nodes", "num_edges", "num_parts", "node_map") if k not in config]
    if missing:
        raise InputError(f"{part_config}: not a DGL partition config, missing {missing}")
    node_map = config["node_map"]
    if not isinstance(node_map, dict):
        raise InputError(f"{part_config}: node_map is not a dict of id ranges (a partition from DGL < 0.8 without "
                         "reshuffling); re-partition with a newer DGL")
    if len(node_map) != 1 or len(config.get("etypes", {"_E": 0})) != 1:
        raise InputError(f"{part_config}: a heterogeneous graph (node types {sorted(node_map)}); sarlab trains "
                         "homogeneous graphs")
    ranges = next(iter(node_map.values()))
    if len(ranges) != config["num_parts"] or [r[0] for r in ranges] != [0] + [r[1] for r in ranges[:-1]] \
            or ranges[-1][1] != config["num_nodes"]:
        raise InputError(f"{part_config}: node_map {ranges} does not split 0..{config['num_nodes']} into "
                         f"{config['num_parts']} consecutive ranges")
    for p in range(config["num_parts"]):
        files = config.get(f"part-{p}", {})
        if "part_graph" not in files or "node_feats" not in files:
            raise InputError(f"{part_config}: part-{p} names no part_graph/node_feats files")
    return config


def _import_dgl():
    os.environ.setdefault("DGLBACKEND", "pytorch")  # else DGL writes ~/.dgl/config.json on first import
    try:
        import dgl
        import dgl.data.utils
    except Exception as err:  # DGL fails to import in many ways (ImportError, numpy 2 AttributeErrors, ...)
        raise ImportError(f"reading DGL partitions needs the 'dgl' package, which did not import here "
                          f"({err.__class__.__name__}: {str(err).splitlines()[0] if str(err) else ''}). "
                          + DGL_HELP) from err
    return dgl


def read_parts(part_config: str, config: dict) -> list[DGLPart]:
    """Read every part's ``graph.dgl`` and ``node_feat.dgl`` with DGL."""
    dgl = _import_dgl()
    base = os.path.dirname(os.path.abspath(part_config))
    parts = []
    for p in range(config["num_parts"]):
        files = config[f"part-{p}"]
        graph_path, feat_path = (os.path.join(base, files[k]) for k in ("part_graph", "node_feats"))
        for path in (graph_path, feat_path):
            if not os.path.isfile(path):
                raise InputError(f"DGL partition file missing: {path}")
        g = dgl.load_graphs(graph_path)[0][0]
        src, dst = g.edges()
        tensors = dgl.data.utils.load_tensors(feat_path)
        parts.append(DGLPart(g.ndata["_ID"].numpy().astype(np.int64), g.ndata["inner_node"].numpy().astype(bool),
                             src.numpy().astype(np.int64), dst.numpy().astype(np.int64),
                             g.edata["inner_edge"].numpy().astype(bool),
                             {k.split("/", 1)[-1]: v.numpy() for k, v in tensors.items()}))
    return parts


def _pick(node_data: dict, names: tuple[str, ...], what: str, required: bool, where: str):
    for name in names:
        if name in node_data:
            return node_data[name]
    if required:
        raise InputError(f"{where}: no {what} among the node data {sorted(node_data)} (looked for {list(names)}); "
                         f"name it with --dgl-keys {what}=NAME")
    return None


def assemble(config: dict, parts: list[DGLPart], keys: dict | None = None,
             orig_ids: np.ndarray | None = None) -> tuple[Graph, np.ndarray]:
    """The whole graph and each node's part, from DGL parts (see the module docstring).

    Args:
        config: :func:`read_config`.
        parts: :func:`read_parts` (or arrays laid out the same way).
        keys: ``{"features"|"labels"|"train"|"val"|"test": node data name}`` overriding :data:`DEFAULT_KEYS`.
        orig_ids: ``orig_ids[reshuffled id] = original id``; the graph is then numbered by original id.
    """
    names = {k: ((keys or {})[k],) if k in (keys or {}) else v for k, v in DEFAULT_KEYS.items()}
    n, where = int(config["num_nodes"]), f"DGL partition {config['graph_name']!r}"
    ranges = next(iter(config["node_map"].values()))
    part_of = np.empty(n, dtype=np.int64)
    columns = {k: [] for k in DEFAULT_KEYS}
    src, dst = [], []
    for p, (part, (start, end)) in enumerate(zip(parts, ranges)):
        owned = np.sort(part.global_ids[part.inner_node])
        if not np.array_equal(owned, np.arange(start, end)):
            raise InputError(f"{where}: part {p} owns nodes other than its node_map range [{start}, {end})")
        part_of[start:end] = p
        for key in DEFAULT_KEYS:
            value = _pick(part.node_data, names[key], key, key in ("features", "labels", "train"), where)
            if value is not None and value.shape[0] != end - start:
                raise InputError(f"{where}: part {p} has {value.shape[0]} rows of {key} for {end - start} nodes")
            columns[key].append(value)
        src.append(part.global_ids[part.src[part.inner_edge]])
        dst.append(part.global_ids[part.dst[part.inner_edge]])
    src, dst = np.concatenate(src), np.concatenate(dst)
    if src.size != int(config["num_edges"]):
        raise InputError(f"{where}: the parts own {src.size} edges, the config says {config['num_edges']}")
    data = {}
    for key, blocks in columns.items():
        if all(b is None for b in blocks):
            data[key] = np.zeros(n, dtype=bool)  # a split DGL did not store: empty
        elif any(b is None for b in blocks):
            raise InputError(f"{where}: {key} is stored for some parts only")
        else:
            data[key] = np.concatenate(blocks)
    features = data["features"].reshape(n, -1).astype(np.float32)
    labels = integer_labels(data["labels"], where)
    masks = [data[k].astype(bool) for k in ("train", "val", "test")]
    if orig_ids is not None:
        orig_ids = np.asarray(orig_ids, dtype=np.int64).reshape(-1)
        if orig_ids.shape != (n,) or not np.array_equal(np.sort(orig_ids), np.arange(n)):
            raise InputError(f"{where}: the original ids must be a permutation of 0..{n - 1} (partition_graph's "
                             "orig_nids)")
        inverse = np.empty(n, dtype=np.int64)
        inverse[orig_ids] = np.arange(n)  # original id -> reshuffled id
        src, dst, part_of = orig_ids[src], orig_ids[dst], part_of[inverse]
        features, labels, masks = features[inverse], labels[inverse], [m[inverse] for m in masks]
    src, dst = clean_edges(src, dst, n, undirected=False)
    num_classes = int(labels.max()) + 1 if labels.size and labels.max() >= 0 else 0
    return Graph(str(config["graph_name"]), n, src, dst, features, labels, *masks, num_classes), part_of


def load_orig_ids(path: str) -> np.ndarray:
    """Original node ids saved from ``partition_graph(..., return_mapping=True)``: ``.npy`` or ``.pt``."""
    if not os.path.isfile(path):
        raise InputError(f"original-id file not found: {path!r}")
    if path.endswith(".pt"):
        value = torch.load(path, map_location="cpu", weights_only=True)
        value = next(iter(value.values())) if isinstance(value, dict) else value
        return np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    return np.load(path, allow_pickle=False)


def convert(part_config: str, out_dir: str, keys: str = "", orig_ids: str | None = None, force: bool = False,
            progress=None) -> dict:
    """Convert a DGL partition into a sarlab partition directory; returns its manifest.

    Args:
        part_config: the JSON that DGL's ``partition_graph`` wrote.
        out_dir: new sarlab partition directory (an existing sarlab one is replaced only with ``force``).
        keys: ``features=NAME,labels=NAME,train=NAME,val=NAME,test=NAME`` (DGL node data names), each optional.
        orig_ids: path of the saved ``orig_nids`` (``.npy``/``.pt``), to number nodes by original id.
        progress: optional callable taking one line of progress.
    """
    check_output_dir(out_dir, force)
    config = read_config(part_config)
    parsed = parse_params(keys, {k: str for k in DEFAULT_KEYS}, "--dgl-keys")
    mapping = load_orig_ids(orig_ids) if orig_ids else None
    parts = read_parts(part_config, config)
    if progress:
        progress(f"read {len(parts)} DGL parts of {config['graph_name']!r}: {config['num_nodes']} nodes, "
                 f"{config['num_edges']} edges")
    graph, part_of = assemble(config, parts, parsed, mapping)
    if progress and graph.num_edges != config["num_edges"]:
        progress(f"dropped {config['num_edges'] - graph.num_edges} self-loops/duplicate edges (sarlab graphs "
                 "have neither; GCN adds self-loops itself, GAT by default)")
    return write_partition(graph, part_of, out_dir, source=f"dgl:{os.path.abspath(part_config)}",
                           method=f"dgl:{config.get('part_method', '?')}", progress=progress, force=force)
