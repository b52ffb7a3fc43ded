"""``ShardedGraph``: a worker's in-edges grouped by source partition, and the rows each peer needs.

Shard ``q`` of worker ``p`` holds the edges whose destination ``p`` owns and whose source ``q`` owns,
as a CSR over ``p``'s local destination rows; its column index points into the rows that ``q`` sends
(``q == p``: ``p``'s own rows). Layers call :meth:`ShardedGraph.aggregate`, which runs the configured
mode (``sar``, ``sa`` or ``oneshot``) so that model code reads like single-process code.

On a typed graph every shard's edges carry their relation (:func:`typed_shard`), and
:func:`relation_shards` splits a shard by relation over the same source rows, so a relational layer fetches a
peer's rows once per ring round and aggregates every relation from them.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from sarlab import kernels
from sarlab.core import phases
from sarlab.core.aggregate import run_aggregation
from sarlab.core.comm import Comm
from sarlab.core.config import EngineConfig
from sarlab.data.partition import Partition


class Shard:
    """Edges ``src -> dst`` from one source partition, destination-sorted, with cached CSR matrices."""

    edge_type: torch.Tensor | None = None  # relation of each edge, in the shard's order (see typed_shard)

    def __init__(self, peer: int, src: torch.Tensor, dst: torch.Tensor, num_dst: int, num_src: int):
        self.peer, self.num_dst, self.num_src = peer, num_dst, num_src
        order = torch.argsort(dst * max(num_src, 1) + src) if dst.numel() else dst
        self.src, self.dst = src[order].contiguous(), dst[order].contiguous()
        self.rowptr = torch.zeros(num_dst + 1, dtype=torch.long)
        if self.dst.numel():
            torch.cumsum(torch.bincount(self.dst, minlength=num_dst), 0, out=self.rowptr[1:])
        self._csr: dict = {}
        self._transpose = None
        self.cache: dict = {}  # per-shard derived structures that layers may keep (e.g. a CSC transpose)

    @property
    def num_edges(self) -> int:
        return int(self.src.numel())

    @phases.tagged("graph_structure")
    def transpose_index(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(colptr over source rows, destination of each edge in source order, edge permutation)."""
        if self._transpose is None:
            perm = torch.argsort(self.src * max(self.num_dst, 1) + self.dst) if self.src.numel() else self.src
            colptr = torch.zeros(self.num_src + 1, dtype=torch.long)
            if self.src.numel():
                torch.cumsum(torch.bincount(self.src, minlength=self.num_src), 0, out=colptr[1:])
            self._transpose = (colptr, self.dst[perm].contiguous(), perm)
        return self._transpose

    @phases.tagged("graph_structure")
    def matrix(self, dtype: torch.dtype, transpose: bool = False) -> torch.Tensor:
        """The 0/1 adjacency as a sparse CSR tensor, ``[num_dst, num_src]`` (or its transpose)."""
        key = (dtype, transpose)
        if key not in self._csr:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "sparse CSR support is in beta"
                ones = torch.ones(self.num_edges, dtype=dtype)
                if transpose:
                    colptr, rows, _ = self.transpose_index()
                    mat = torch.sparse_csr_tensor(colptr, rows, ones, size=(self.num_src, self.num_dst))
                else:
                    mat = torch.sparse_csr_tensor(self.rowptr, self.src, ones, size=(self.num_dst, self.num_src))
            self._csr[key] = mat
        return self._csr[key]

    def spmm(self, x: torch.Tensor, transpose: bool = False, out: torch.Tensor | None = None,
             backend: str | None = None) -> torch.Tensor:
        """``A @ x`` (or ``A^T @ x``), added into ``out`` when given; ``x`` may have trailing dims.

        Without autograd, float32/float64 and a contiguous (or no) ``out``, the C++ kernel sums each row's
        edges in index order straight into ``out`` (deterministic for any thread count; ``A^T`` runs over
        :meth:`transpose_index`); otherwise, or on the torch backend, ``torch.sparse`` CSR ``addmm``.

        Args:
            x: ``[num_src, ...]`` (``[num_dst, ...]`` for the transpose).
            transpose: multiply by ``A^T``.
            out: ``[rows, ...]`` accumulator (same element count per row as ``x``), updated in place.
            backend: 'cpp', 'torch' or None (see :func:`kernels.backend`).
        """
        rows = self.num_src if transpose else self.num_dst
        flat = x.reshape(x.shape[0], -1)
        if self.num_edges == 0 or flat.shape[1] == 0:
            res = torch.zeros(rows, flat.shape[1], dtype=x.dtype)
            res = res.reshape(rows, *x.shape[1:])
            return res if out is None else out
        differentiable = torch.is_grad_enabled() and (flat.requires_grad or (out is not None and out.requires_grad))
        if (not differentiable and (out is None or out.is_contiguous()) and x.dtype in _KERNEL_DTYPES
                and kernels.backend(backend) == "cpp"):
            rowptr, col = self.transpose_index()[:2] if transpose else (self.rowptr, self.src)
            if out is None:
                return kernels.spmm_csr(rowptr, col, flat, backend="cpp").reshape(rows, *x.shape[1:])
            kernels.spmm_csr(rowptr, col, flat, out=out.view(rows, -1), backend="cpp")
            return out
        mat = self.matrix(x.dtype, transpose)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if out is None:
                return (mat @ flat.contiguous()).reshape(rows, *x.shape[1:])
            acc = out.reshape(rows, -1)
            if differentiable or not out.is_contiguous():
                return torch.sparse.addmm(acc, mat, flat.contiguous()).reshape(out.shape)
            # in place: no fresh rows x F output (whose pages would be faulted in anew) per shard
            acc.addmm_(mat, flat.contiguous())
        return out


#: dtypes the C++ shard SpMM handles (others go through torch.sparse)
_KERNEL_DTYPES = (torch.float32, torch.float64)


class RelationShard(NamedTuple):
    """The edges of one relation in a shard: ``shard`` maps the parent's source rows onto ``dst_rows`` (the
    sorted destination rows the relation reaches, its row ``k`` is destination ``dst_rows[k]``)."""

    relation: int
    dst_rows: torch.Tensor
    shard: Shard


def typed_shard(peer: int, src: torch.Tensor, dst: torch.Tensor, edge_type: torch.Tensor | None, num_dst: int,
                num_src: int) -> Shard:
    """A :class:`Shard` whose edges carry relation ids: ``shard.edge_type[k]`` is the relation of its edge ``k``.

    The edges are put in the shard's (destination, source) order first, by a stable sort; the shard's own sort
    then leaves every (source, destination) pair where it is, so the relations stay aligned with the edges.
    """
    if edge_type is None:
        return Shard(peer, src, dst, num_dst, num_src)
    order = torch.argsort(dst * max(num_src, 1) + src, stable=True)
    shard = Shard(peer, src[order], dst[order], num_dst, num_src)
    shard.edge_type = edge_type[order].contiguous()
    return shard


#: destination rows per block of a relation shard (bounds a relational layer's per-block temporaries)
RELATION_BLOCK_ROWS = 1 << 13


@phases.tagged("graph_structure")
def relation_shards(shard: Shard, num_relations: int) -> list[RelationShard]:
    """The shard split by relation (relations without edges left out), each relation's destination rows in blocks
    of at most :data:`RELATION_BLOCK_ROWS`; built once and cached on the shard. An untyped shard is relation 0."""
    cached = shard.cache.get("relations")
    if cached is None:
        cached = []
        edge_type = getattr(shard, "edge_type", None)
        for relation in range(num_relations):
            keep = edge_type == relation if edge_type is not None else torch.ones(shard.num_edges, dtype=torch.bool)
            if not bool(keep.any()):
                continue
            rows, compact = torch.unique(shard.dst[keep], return_inverse=True)
            src = shard.src[keep]
            for first in range(0, rows.numel(), RELATION_BLOCK_ROWS):  # compact is sorted: blocks are edge ranges
                end = min(first + RELATION_BLOCK_ROWS, rows.numel())
                lo, hi = (int(v) for v in torch.searchsorted(compact, torch.tensor([first, end])))
                cached.append(RelationShard(relation, rows[first:end], Shard(
                    shard.peer, src[lo:hi], compact[lo:hi] - first, end - first, shard.num_src)))
        shard.cache["relations"] = cached
    return cached


@dataclass(frozen=True)
class ShardIndex:
    """Rows exchanged with each peer: ``send_rows[q]`` (my rows ``q`` needs), ``recv_counts[q]``."""

    send_rows: list
    recv_counts: list


class ShardedGraph:
    """A worker's part of the graph: local node range, shards by source partition, communication.

    Layers read their input rows as sources and produce one output row per destination. On a whole graph both
    are the worker's ``num_nodes`` rows; a pruned view (see :mod:`sarlab.strategies.mfg`) reads ``num_src`` source rows
    and produces ``num_nodes`` destination rows, the source rows ``dst_rows``; :meth:`dst` picks them out of a
    source-row tensor (the identity on a whole graph). ``in_degree`` is that of the destinations,
    ``src_in_degree`` that of the sources (both the whole graph's in-degrees).

    Args:
        num_local: destination rows (the worker's nodes, or a view's active ones).
        num_src: source rows (default ``num_local``).
        dst_rows: which source rows the destinations are (default: all, in order).
        src_in_degree: in-degree of the source rows (default: ``in_degree``).
        num_relations: relations of a typed graph (1: untyped).
    """

    def __init__(self, comm: Comm, config: EngineConfig, num_local: int, node_start: int, num_global: int,
                 shards: list[Shard], index: ShardIndex, orig_ids: torch.Tensor, *, num_src: int | None = None,
                 dst_rows: torch.Tensor | None = None, src_in_degree: torch.Tensor | None = None,
                 num_relations: int = 1):
        self.comm, self.config = comm, config
        self.rank, self.world = comm.rank, comm.world
        self.num_nodes, self.node_start, self.num_nodes_global = num_local, node_start, num_global
        self.num_src = num_local if num_src is None else num_src
        self.shards, self.index, self.orig_ids = shards, index, orig_ids
        self.dst_rows, self.num_relations = dst_rows, num_relations
        in_degree = torch.zeros(num_local, dtype=torch.long)
        for shard in shards:
            in_degree += shard.rowptr[1:] - shard.rowptr[:-1]
        self.in_degree = in_degree
        self.src_in_degree = in_degree if src_in_degree is None else src_in_degree
        self._merged = None
        self._relation_degree = None

    @property
    def local_shard(self) -> Shard:
        return self.shards[self.rank]

    def dst(self, x: torch.Tensor) -> torch.Tensor:
        """The destination rows of a source-row tensor (``x`` itself on a whole graph)."""
        return x if self.dst_rows is None else x[self.dst_rows]

    def layer(self, index: int) -> ShardedGraph:
        """The graph layer ``index`` of a model runs on: the whole graph, every layer (see
        :mod:`sarlab.strategies.mfg`)."""
        return self

    @classmethod
    def from_partition(cls, part: Partition, comm: Comm, config: EngineConfig) -> ShardedGraph:
        arrays = part.arrays
        num_parts, own_part = part.num_parts, part.part
        if comm.world != num_parts or comm.rank != own_part:
            raise ValueError(f"partition part {own_part} of {num_parts} loaded by rank {comm.rank} "
                             f"of world {comm.world}")
        num_local = part.num_nodes
        edge_ptr, send_ptr, recv_ptr = arrays["edge_ptr"], arrays["send_ptr"], arrays["recv_ptr"]
        edge_type = arrays.get("edge_type")
        shards = []
        for peer in range(num_parts):
            first, last = int(edge_ptr[peer]), int(edge_ptr[peer + 1])
            num_src = num_local if peer == own_part else int(recv_ptr[peer + 1] - recv_ptr[peer])
            types = None if edge_type is None else torch.from_numpy(edge_type[first:last].copy())
            shards.append(typed_shard(peer, torch.from_numpy(arrays["edge_src"][first:last].copy()),
                                      torch.from_numpy(arrays["edge_dst"][first:last].copy()), types, num_local,
                                      num_src))
        send_rows = [torch.from_numpy(arrays["send_rows"][send_ptr[peer]:send_ptr[peer + 1]].copy())
                     for peer in range(num_parts)]
        recv_counts = [int(recv_ptr[peer + 1] - recv_ptr[peer]) for peer in range(num_parts)]
        assert int(arrays["orig_ids"].shape[0]) == num_local
        return cls(comm, config, num_local, part.node_start, part.num_nodes_global, shards,
                   ShardIndex(send_rows, recv_counts), torch.from_numpy(arrays["orig_ids"].copy()),
                   num_relations=part.num_relations)

    @classmethod
    def single(cls, src: np.ndarray, dst: np.ndarray, num_nodes: int, config: EngineConfig,
               edge_type: np.ndarray | None = None, num_relations: int = 1) -> ShardedGraph:
        """The whole graph in one process (world size 1); ``edge_type``: relation of each edge."""
        types = None if edge_type is None else torch.as_tensor(edge_type, dtype=torch.long)
        shard = typed_shard(0, torch.as_tensor(src, dtype=torch.long), torch.as_tensor(dst, dtype=torch.long), types,
                            num_nodes, num_nodes)
        return cls(Comm(0, 1), config, num_nodes, 0, num_nodes, [shard],
                   ShardIndex([torch.zeros(0, dtype=torch.long)], [0]), torch.arange(num_nodes),
                   num_relations=num_relations)

    @phases.tagged("graph_structure")
    def merged_shard(self) -> Shard:
        """All in-edges as one shard over ``[own rows; halo rows of peer 0, 1, ...]`` (oneshot mode)."""
        if self._merged is None:
            offsets, total = [], self.num_src
            for peer in range(self.world):
                offsets.append(0 if peer == self.rank else total)
                if peer != self.rank:
                    total += self.index.recv_counts[peer]
            src = torch.cat([shard.src + offsets[peer] for peer, shard in enumerate(self.shards)])
            dst = torch.cat([shard.dst for shard in self.shards])
            typed = all(getattr(shard, "edge_type", None) is not None for shard in self.shards)
            edge_type = torch.cat([shard.edge_type for shard in self.shards]) if typed else None
            self._merged = typed_shard(-1, src, dst, edge_type, self.num_nodes, total)
        return self._merged

    def relation_degree(self) -> torch.Tensor:
        """``[num_nodes, num_relations]``: in-edges of each relation at each destination row (all peers)."""
        if self._relation_degree is None:
            counts = torch.zeros(self.num_nodes * self.num_relations, dtype=torch.long)
            for shard in self.shards:
                relation = shard.edge_type if shard.edge_type is not None else torch.zeros_like(shard.dst)
                counts += torch.bincount(shard.dst * self.num_relations + relation, minlength=counts.numel())
            self._relation_degree = counts.view(self.num_nodes, self.num_relations)
        return self._relation_degree

    def aggregate(self, aggregator, src_x: torch.Tensor, dst_x: torch.Tensor | None = None,
                  params: tuple = ()) -> torch.Tensor:
        """Aggregate messages from every in-neighbour (local and remote) into each local node.

        ``src_x`` holds this worker's rows as sources (peers fetch rows of it); ``dst_x`` optional
        destination-side inputs; ``params`` tensors the aggregator's messages depend on.
        """
        return run_aggregation(self, aggregator, src_x, dst_x, tuple(params))

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.comm.all_reduce(tensor)
