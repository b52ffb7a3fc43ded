"""The layout of a partition before it is written: nodes renumbered part by part, in-edges grouped into shards by
the source's owner, the halo rows each part needs, and the arrays of each part (:mod:`sarlab.data.partition` writes
them and describes the on-disk format).

Part ``p`` owns the new ids ``starts[p]:starts[p + 1]`` (its nodes in their original order). Its in-edges, sorted
by (source part, destination, source), are the shards ``q = 0..P-1``: shard ``(p, q)`` holds the edges
``group_ptr[p P + q]:group_ptr[p P + q + 1]`` of the sorted edge lists. ``recv[p][q]`` are the sorted rows (local
to ``q``) that ``p``'s remote shard ``q`` reads; that shard's source index points into them, the local shard's
into ``p``'s own rows.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sarlab.data.graphs import Graph


@dataclass(frozen=True)
class PartLayout:
    """Renumbering and shards of a graph split into parts (module docstring)."""

    num_parts: int
    #: new id -> old id
    order: np.ndarray
    #: part ``p`` owns the new ids ``starts[p]:starts[p + 1]``
    starts: np.ndarray
    #: renumbered sources and destinations of the edges, grouped by (destination part, source part, dst, src)
    src: np.ndarray
    dst: np.ndarray
    #: the relation of each grouped edge (typed graphs; None otherwise)
    edge_type: np.ndarray | None
    #: shard ``(p, q)``'s edges: ``group_ptr[p * num_parts + q]:group_ptr[p * num_parts + q + 1]``
    group_ptr: np.ndarray
    edges_per_shard: np.ndarray
    #: ``recv[p][q]``: the rows (local to ``q``) that ``p`` needs; None for ``q == p``
    recv: list[list[np.ndarray | None]]
    #: ``halo_rows[p][q]``: how many (0 for ``q == p``)
    halo_rows: list[list[int]]


def part_layout(graph: Graph, parts: np.ndarray, counts: np.ndarray) -> PartLayout:
    """Renumber ``graph``'s nodes by part (``parts``: part id per node, ``counts``: nodes per part, none empty) and
    group its edges into shards."""
    num_parts, n = len(counts), graph.num_nodes
    order = np.argsort(parts, kind="stable")  # new id -> old id
    new_id = np.empty(n, dtype=np.int64)
    new_id[order] = np.arange(n)
    starts = np.concatenate([[0], np.cumsum(counts)])
    src, dst = new_id[graph.src], new_id[graph.dst]
    src_part, dst_part = parts[graph.src], parts[graph.dst]
    # group edges by (dst part, src part, dst, src)
    edge_order = np.lexsort((src, dst, src_part, dst_part))
    src, dst, src_part, dst_part = src[edge_order], dst[edge_order], src_part[edge_order], dst_part[edge_order]
    etype = graph.edge_type[edge_order] if graph.typed else None
    group = dst_part * num_parts + src_part
    group_ptr = np.searchsorted(group, np.arange(num_parts * num_parts + 1))
    edges_per_shard = np.diff(group_ptr).reshape(num_parts, num_parts)
    recv = [[None] * num_parts for _ in range(num_parts)]  # recv[p][q]: rows (local to q) that p needs
    for p in range(num_parts):
        for q in range(num_parts):
            if q != p:
                s = src[group_ptr[p * num_parts + q]:group_ptr[p * num_parts + q + 1]] - starts[q]
                recv[p][q] = np.unique(s)
    halo_rows = [[0 if q == p else int(recv[p][q].size) for q in range(num_parts)] for p in range(num_parts)]
    return PartLayout(num_parts, order, starts, src, dst, etype, group_ptr, edges_per_shard, recv, halo_rows)


def part_arrays(graph: Graph, layout: PartLayout, p: int) -> dict[str, np.ndarray]:
    """The arrays of part ``p``, in the order they are written (:data:`sarlab.data.partition.PART_ARRAYS`, a typed
    graph's ``node_type`` and ``edge_type`` after ``edge_dst``): its nodes' rows, its in-edges with the sources
    pointing into its own rows or the halo rows, its receive and send lists."""
    num_parts, starts, group_ptr, recv = layout.num_parts, layout.starts, layout.group_ptr, layout.recv
    old = layout.order[starts[p]:starts[p + 1]]
    lo, hi = group_ptr[p * num_parts], group_ptr[(p + 1) * num_parts]
    edge_src = layout.src[lo:hi].copy()
    for q in range(num_parts):
        a, b = group_ptr[p * num_parts + q] - lo, group_ptr[p * num_parts + q + 1] - lo
        local = edge_src[a:b] - starts[q]
        edge_src[a:b] = local if q == p else np.searchsorted(recv[p][q], local)
    empty = np.zeros(0, dtype=np.int64)
    recv_lists = [empty if q == p else recv[p][q] for q in range(num_parts)]
    send_lists = [empty if q == p else recv[q][p] for q in range(num_parts)]
    return {
        "features": graph.features[old],
        "labels": graph.labels[old],
        "train_mask": graph.train_mask[old],
        "val_mask": graph.val_mask[old],
        "test_mask": graph.test_mask[old],
        "orig_ids": old.astype(np.int64),
        "edge_src": edge_src.astype(np.int64),
        "edge_dst": (layout.dst[lo:hi] - starts[p]).astype(np.int64),
        **({"node_type": graph.node_type[old].astype(np.int64),
            "edge_type": layout.edge_type[lo:hi].astype(np.int64)} if graph.typed else {}),
        "edge_ptr": (group_ptr[p * num_parts:(p + 1) * num_parts + 1] - lo).astype(np.int64),
        "recv_rows": np.concatenate(recv_lists).astype(np.int64),
        "recv_ptr": np.concatenate([[0], np.cumsum([r.size for r in recv_lists])]).astype(np.int64),
        "send_rows": np.concatenate(send_lists).astype(np.int64),
        "send_ptr": np.concatenate([[0], np.cumsum([r.size for r in send_lists])]).astype(np.int64),
    }
