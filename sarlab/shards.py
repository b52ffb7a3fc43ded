"""``ShardedGraph``: a worker's in-edges grouped by source partition, and the rows each peer needs.

Shard ``q`` of worker ``p`` holds the edges whose destination ``p`` owns and whose source ``q`` owns,
as a CSR over ``p``'s local destination rows; its column index points into the rows that ``q`` sends
(``q == p``: ``p``'s own rows). Layers call :meth:`ShardedGraph.aggregate`, which runs the configured
mode (``sar``, ``sa`` or ``oneshot``) so that model code reads like single-process code.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import torch

from .comm import Comm
from .config import EngineConfig
from .partition import Partition


class Shard:
    """Edges ``src -> dst`` from one source partition, destination-sorted, with cached CSR matrices."""

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

    def transpose_index(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(colptr over source rows, destination of each edge in source order, edge permutation)."""
        if self._transpose is None:
            perm = torch.argsort(self.src * max(self.num_dst, 1) + self.dst) if self.src.numel() else self.src
            colptr = torch.zeros(self.num_src + 1, dtype=torch.long)
            if self.src.numel():
                torch.cumsum(torch.bincount(self.src, minlength=self.num_src), 0, out=colptr[1:])
            self._transpose = (colptr, self.dst[perm].contiguous(), perm)
        return self._transpose

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

    def spmm(self, x: torch.Tensor, transpose: bool = False, out: torch.Tensor | None = None) -> torch.Tensor:
        """``A @ x`` (or ``A^T @ x``), added into ``out`` when given; ``x`` may have trailing dims."""
        rows = self.num_src if transpose else self.num_dst
        flat = x.reshape(x.shape[0], -1)
        if self.num_edges == 0 or flat.shape[1] == 0:
            res = torch.zeros(rows, flat.shape[1], dtype=x.dtype)
            res = res.reshape(rows, *x.shape[1:])
            return res if out is None else out
        mat = self.matrix(x.dtype, transpose)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if out is None:
                return (mat @ flat.contiguous()).reshape(rows, *x.shape[1:])
            acc = out.reshape(rows, -1)
            differentiable = torch.is_grad_enabled() and (out.requires_grad or flat.requires_grad)
            if differentiable or not out.is_contiguous():
                return torch.sparse.addmm(acc, mat, flat.contiguous()).reshape(out.shape)
            # in place: no fresh rows x F output (whose pages would be faulted in anew) per shard
            acc.addmm_(mat, flat.contiguous())
        return out


@dataclass(frozen=True)
class ShardIndex:
    """Rows exchanged with each peer: ``send_rows[q]`` (my rows ``q`` needs), ``recv_counts[q]``."""

    send_rows: list
    recv_counts: list


class ShardedGraph:
    """A worker's part of the graph: local node range, shards by source partition, communication."""

    def __init__(self, comm: Comm, config: EngineConfig, num_local: int, node_start: int, num_global: int,
                 shards: list[Shard], index: ShardIndex, orig_ids: torch.Tensor):
        self.comm, self.config = comm, config
        self.rank, self.world = comm.rank, comm.world
        self.num_nodes, self.node_start, self.num_nodes_global = num_local, node_start, num_global
        self.shards, self.index, self.orig_ids = shards, index, orig_ids
        deg = torch.zeros(num_local, dtype=torch.long)
        for shard in shards:
            deg += shard.rowptr[1:] - shard.rowptr[:-1]
        self.in_degree = deg
        self._merged = None
        self._layer_calls = 0

    @property
    def local_shard(self) -> Shard:
        return self.shards[self.rank]

    @classmethod
    def from_partition(cls, part: Partition, comm: Comm, config: EngineConfig) -> ShardedGraph:
        a = part.arrays
        P, p = part.num_parts, part.part
        if comm.world != P or comm.rank != p:
            raise ValueError(f"partition part {p} of {P} loaded by rank {comm.rank} of world {comm.world}")
        n = part.num_nodes
        shards = []
        for q in range(P):
            lo, hi = int(a["edge_ptr"][q]), int(a["edge_ptr"][q + 1])
            num_src = n if q == p else int(a["recv_ptr"][q + 1] - a["recv_ptr"][q])
            shards.append(Shard(q, torch.from_numpy(a["edge_src"][lo:hi].copy()),
                                torch.from_numpy(a["edge_dst"][lo:hi].copy()), n, num_src))
        send = [torch.from_numpy(a["send_rows"][a["send_ptr"][q]:a["send_ptr"][q + 1]].copy()) for q in range(P)]
        counts = [int(a["recv_ptr"][q + 1] - a["recv_ptr"][q]) for q in range(P)]
        assert int(a["orig_ids"].shape[0]) == n
        return cls(comm, config, n, part.node_start, part.num_nodes_global, shards, ShardIndex(send, counts),
                   torch.from_numpy(a["orig_ids"].copy()))

    @classmethod
    def single(cls, src: np.ndarray, dst: np.ndarray, num_nodes: int, config: EngineConfig) -> ShardedGraph:
        """The whole graph in one process (world size 1)."""
        shard = Shard(0, torch.as_tensor(src, dtype=torch.long), torch.as_tensor(dst, dtype=torch.long),
                      num_nodes, num_nodes)
        return cls(Comm(0, 1), config, num_nodes, 0, num_nodes, [shard],
                   ShardIndex([torch.zeros(0, dtype=torch.long)], [0]), torch.arange(num_nodes))

    def merged_shard(self) -> Shard:
        """All in-edges as one shard over ``[own rows; halo rows of peer 0, 1, ...]`` (oneshot mode)."""
        if self._merged is None:
            offsets, total = [], self.num_nodes
            for q in range(self.world):
                offsets.append(0 if q == self.rank else total)
                if q != self.rank:
                    total += self.index.recv_counts[q]
            src = torch.cat([s.src + offsets[q] for q, s in enumerate(self.shards)])
            dst = torch.cat([s.dst for s in self.shards])
            self._merged = Shard(-1, src, dst, self.num_nodes, total)
        return self._merged

    def aggregate(self, aggregator, src_x: torch.Tensor, dst_x: torch.Tensor | None = None,
                  params: tuple = ()) -> torch.Tensor:
        """Aggregate messages from every in-neighbour (local and remote) into each local node.

        ``src_x`` holds this worker's rows as sources (peers fetch rows of it); ``dst_x`` optional
        destination-side inputs; ``params`` tensors the aggregator's messages depend on.
        """
        from .aggregate import run_aggregation

        return run_aggregation(self, aggregator, src_x, dst_x, tuple(params))

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return self.comm.all_reduce(tensor)
