"""Distributed neighbour sampling: a worker's graph and feature store, and a sampler that crosses partitions.

Each worker holds its partition's in-edges (the :class:`GraphStore`: a CSR over its own nodes whose columns are
the neighbours' global ids, the renumbered ids of :mod:`sarlab.data.partition`, and their original ids) and its nodes'
features. A node is sampled by its owner: a worker asks every peer, in one message per peer and layer, for the
samples of the nodes that peer owns, and the owner answers with each node's in-degree, original id and sampled
neighbours (DistDGL's scheme; PyG's ``torch_geometric.distributed`` does the same over RPC). Features of the input
nodes are fetched from their owners the same way, the reply posted without waiting for it (:class:`FeatureFetch`),
so that it can overlap the computation of the mini-batches before.

**Semantics.** Node ``v`` at layer ``l`` of epoch ``e`` gets ``min(k, deg v)`` of its in-edges, uniformly without
replacement, by Floyd's algorithm over the positions of its in-edges listed in the order of their sources'
original ids: draw ``i = 0..k-1`` takes ``t`` uniform in ``[0, d - k + i]`` from ``hash(seed, e, l, orig(v), i)``
and keeps ``t``, or ``d - k + i`` when ``t`` was taken already (every ``k``-subset equally likely). Order and draws
depend on original ids only, so a node's sample is the same whichever worker owns it and for any number of
workers; it is also the same in every mini-batch of the epoch that needs it, which is what lets a worker sample
the union of several batches' frontiers at once (:meth:`DistSampler.sample_level`) and cut each batch's blocks out
of it. Fan-out ``all`` takes every in-edge.

**Requests.** Node sets travel as sorted global ids, so the nodes a worker wants from peer ``q`` are one slice, and
the request is a bit mask over ``q``'s node range (``ceil(n_q / 8)`` bytes, a size both sides know): no size
exchange precedes it, and the owner answers in its own row order, which is the requester's order too. A layer's
samples then cost one mask exchange and one reply (two for fan-out ``all``, whose reply length the requester cannot
know), a feature fetch one mask exchange and the rows.

**Transport.** The existing point-to-point layer (:meth:`sarlab.core.comm.Comm.exchange`, gloo ``batch_isend_irecv``)
on a process group of its own, so that a feature fetch in flight never shares tags with the trainer's
all-reduces. Every worker makes the same calls in the same order, so each exchange is an all-to-all that every
worker joins. (torch RPC works on this torch with TensorPipe, but needs its own rendezvous and transport set-up
inside the emulated networks, runs a thread pool in every worker and is not counted by
:class:`~sarlab.core.comm.CommStats`; batched per layer, lock-step requests gain nothing from its asynchrony.)
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from sarlab.core.comm import Comm, Pending
from sarlab.core.config import ALL_NEIGHBOURS
from sarlab.data.partition import Partition

# tags of the sampler's messages (its own process group; distinct kinds never match each other)
TAG_MASKS, TAG_SAMPLES, TAG_NEIGHBOURS, TAG_ROWS, TAG_DEGREES, TAG_SETUP = 21, 22, 23, 24, 25, 26

_MASK32 = 0xFFFFFFFF
_BITS = torch.arange(8, dtype=torch.uint8)


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xor-shift-multiply) on int64 tensors holding values in [0, 2^32)."""
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _MASK32
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _MASK32
    return x ^ (x >> 16)


def key_of(*parts: int) -> int:
    """One 32-bit key from integers (seed, epoch, layer, ...)."""
    key = torch.tensor([0x9E3779B9], dtype=torch.long)
    for part in parts:
        key = _mix32(key ^ _mix32(torch.tensor([part & _MASK32], dtype=torch.long)))
    return int(key[0])


def node_keys(key: int, orig: torch.Tensor) -> torch.Tensor:
    """Uniform 32-bit keys ``hash(key, orig id)`` (int64 values in [0, 2^32))."""
    return _mix32(_mix32((orig.to(torch.long) & _MASK32) ^ key) ^ (key >> 3))


def segments(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(segment of every item, position of every item within its segment) for segments of ``counts`` items."""
    seg = torch.repeat_interleave(torch.arange(counts.numel()), counts)
    starts = torch.cumsum(counts, 0) - counts
    return seg, torch.arange(seg.numel()) - starts[seg]


def pack_mask(mask: torch.Tensor) -> torch.Tensor:
    """``[ceil(n / 8)]`` uint8: bit ``j % 8`` of byte ``j // 8`` is ``mask[j]`` (numpy's little bit order)."""
    padded = torch.zeros(-(-mask.numel() // 8) * 8, dtype=torch.uint8)
    padded[:mask.numel()] = mask
    return (padded.view(-1, 8) << _BITS).sum(1).to(torch.uint8)


def unpack_mask(packed: torch.Tensor, n: int) -> torch.Tensor:
    """The ``[n]`` bool mask that :func:`pack_mask` packed."""
    return ((packed.unsqueeze(1) >> _BITS) & 1).view(-1)[:n].bool()


class Sample(NamedTuple):
    """Samples of ``m`` nodes: their in-degree and original id, how many neighbours each got, and the neighbours'
    global ids (node after node)."""

    degree: torch.Tensor
    orig: torch.Tensor
    counts: torch.Tensor
    neighbours: torch.Tensor


class GraphStore:
    """One worker's share of the graph: the in-edges of its nodes, each node's listed by its sources' original ids.

    Args:
        rowptr: ``[n + 1]`` CSR offsets over the worker's nodes (local rows).
        neighbours: ``[E]`` global (renumbered) id of each in-edge's source, in canonical order (see
            :meth:`canonical`).
        orig_ids: ``[n]`` original ids of the worker's nodes.
        node_starts: ``[P + 1]`` first global id of every part (and the total).
        rank: this worker's part.
    """

    def __init__(self, rowptr: torch.Tensor, neighbours: torch.Tensor, orig_ids: torch.Tensor,
                 node_starts: torch.Tensor, rank: int):
        self.rowptr, self.neighbours, self.orig_ids = rowptr, neighbours, orig_ids
        self.node_starts, self.rank = node_starts, rank
        self.node_start = int(node_starts[rank])
        self.degree = rowptr[1:] - rowptr[:-1]
        self.part_sizes = (node_starts[1:] - node_starts[:-1]).tolist()

    @property
    def num_nodes(self) -> int:
        return int(self.orig_ids.numel())

    @staticmethod
    def canonical(dst: torch.Tensor, neighbours: torch.Tensor, neighbour_orig: torch.Tensor,
                  num_nodes: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(rowptr, neighbours) of edges ``neighbour -> dst`` (local rows), each row's edges by source original id."""
        order = torch.argsort(neighbour_orig, stable=True)
        order = order[torch.argsort(dst[order], stable=True)]
        rowptr = torch.zeros(num_nodes + 1, dtype=torch.long)
        torch.cumsum(torch.bincount(dst, minlength=num_nodes), 0, out=rowptr[1:])
        return rowptr, neighbours[order].contiguous()

    @classmethod
    def from_partition(cls, part: Partition, comm: Comm) -> GraphStore:
        """Build the store of ``part``; every worker calls it at once (it exchanges the halo rows' original ids)."""
        a, rank, world = part.arrays, part.part, part.num_parts
        starts = torch.zeros(world + 1, dtype=torch.long)
        starts[rank] = part.node_start
        starts[world] = part.num_nodes_global if rank == 0 else 0
        comm.all_reduce(starts)
        orig = torch.from_numpy(a["orig_ids"].copy()).long()
        send_ptr, recv_ptr = a["send_ptr"], a["recv_ptr"]
        halo_orig = {}
        sends, recvs = [], []
        for peer in range(world):
            if peer == rank:
                continue
            rows = torch.from_numpy(a["send_rows"][send_ptr[peer]:send_ptr[peer + 1]].copy()).long()
            sends.append((peer, orig[rows]))
            halo_orig[peer] = torch.empty(int(recv_ptr[peer + 1] - recv_ptr[peer]), dtype=torch.long)
            recvs.append((peer, halo_orig[peer]))
        if world > 1:
            comm.exchange(sends, recvs, TAG_SETUP).wait()
        edge_ptr, recv_rows = a["edge_ptr"], torch.from_numpy(a["recv_rows"].copy()).long()
        dst_parts, gid_parts, orig_parts = [], [], []
        for peer in range(world):
            first, last = int(edge_ptr[peer]), int(edge_ptr[peer + 1])
            src = torch.from_numpy(a["edge_src"][first:last].copy()).long()
            dst_parts.append(torch.from_numpy(a["edge_dst"][first:last].copy()).long())
            if peer == rank:
                gid_parts.append(src + part.node_start)
                orig_parts.append(orig[src])
            else:
                rows = recv_rows[int(recv_ptr[peer]):int(recv_ptr[peer + 1])]
                gid_parts.append(rows[src] + starts[peer])
                orig_parts.append(halo_orig[peer][src])
        rowptr, neighbours = cls.canonical(torch.cat(dst_parts), torch.cat(gid_parts), torch.cat(orig_parts),
                                           part.num_nodes)
        return cls(rowptr, neighbours, orig, starts, rank)

    @classmethod
    def single(cls, src, dst, num_nodes: int) -> GraphStore:
        """The whole graph in one store (one worker; global ids = original ids)."""
        src, dst = torch.as_tensor(src, dtype=torch.long), torch.as_tensor(dst, dtype=torch.long)
        rowptr, neighbours = cls.canonical(dst, src, src, num_nodes)
        return cls(rowptr, neighbours, torch.arange(num_nodes), torch.tensor([0, num_nodes]), 0)

    def bounds(self, ids: torch.Tensor) -> list[int]:
        """``[P + 1]`` offsets: the sorted global ``ids`` that part ``q`` owns are ``ids[bounds[q]:bounds[q + 1]]``."""
        return torch.searchsorted(ids, self.node_starts).tolist()

    def sample(self, rows: torch.Tensor, fanout: int, key: int) -> Sample:
        """Samples of the local ``rows``: ``min(fanout, degree)`` in-edges each, uniformly without replacement
        (Floyd's algorithm, see the module docstring); ``fanout`` :data:`~sarlab.core.config.ALL_NEIGHBOURS` takes
        all."""
        degree, orig = self.degree[rows], self.orig_ids[rows]
        counts = degree if fanout == ALL_NEIGHBOURS else degree.clamp(max=fanout)
        seg, offset = segments(counts)
        big = torch.nonzero(degree > counts).view(-1)  # nodes that keep fanout of their in-edges
        if big.numel():  # their segments hold exactly fanout items: overwrite them with Floyd's positions
            starts = torch.cumsum(counts, 0) - counts
            slots = (starts[big].unsqueeze(1) + torch.arange(fanout)).view(-1)
            offset[slots] = floyd_positions(degree[big], fanout, node_keys(key, orig[big])).view(-1)
        return Sample(degree, orig, counts, self.neighbours[self.rowptr[rows][seg] + offset])


def floyd_positions(degree: torch.Tensor, k: int, keys: torch.Tensor) -> torch.Tensor:
    """``[m, k]``: ``k`` distinct positions in ``[0, degree)`` per row (every ``degree > k``), uniformly without
    replacement, by Floyd's algorithm with draw ``i`` from ``hash(keys, i)`` (all rows at once, draw by draw)."""
    chosen = torch.empty((degree.numel(), k), dtype=torch.long)
    for i in range(k):
        top = degree - k + i  # draw i takes t uniform in [0, top]
        t = (_mix32(_mix32(keys ^ i) ^ 0x5BD1E995) * (top + 1)) >> 32
        if i:
            t = torch.where((chosen[:, :i] == t.unsqueeze(1)).any(1), top, t)
        chosen[:, i] = t
    return chosen


class Level(NamedTuple):
    """Samples of a sorted set of ``m`` nodes at one layer: their global ids, in-degrees and original ids, and
    their sampled in-edges as a CSR (``rowptr [m + 1]``, the sources' global ``neighbours``)."""

    ids: torch.Tensor
    degree: torch.Tensor
    orig: torch.Tensor
    rowptr: torch.Tensor
    neighbours: torch.Tensor


def _pack(sample: Sample, fanout: int) -> torch.Tensor:
    """``[m, 3 + fanout]``: degree, original id, count and the neighbours (padded with -1) of every node."""
    out = torch.full((sample.degree.numel(), 3 + fanout), -1, dtype=torch.long)
    out[:, 0], out[:, 1], out[:, 2] = sample.degree, sample.orig, sample.counts
    seg, offset = segments(sample.counts)
    out[seg, 3 + offset] = sample.neighbours
    return out


class DistSampler:
    """Samples layers and fetches rows across partitions; every worker calls the same methods in the same order.

    Args:
        store: this worker's :class:`GraphStore`.
        comm: a :class:`~sarlab.core.comm.Comm` on the sampler's own process group (or world 1).
    """

    def __init__(self, store: GraphStore, comm: Comm):
        self.store, self.comm = store, comm
        self.peers = [peer for peer in range(comm.world) if peer != comm.rank]

    def ask(self, ids: torch.Tensor, bounds: list[int]) -> dict[int, torch.Tensor]:
        """Tell every peer which of its nodes I want (a bit mask over its range; ``ids`` sorted global ids);
        returns the local rows (sorted) every peer wants from me. Blocking."""
        store = self.store
        sends, recvs = [], []
        for peer in self.peers:
            mask = torch.zeros(store.part_sizes[peer], dtype=torch.bool)
            mask[ids[bounds[peer]:bounds[peer + 1]] - int(store.node_starts[peer])] = True
            sends.append((peer, pack_mask(mask)))
            recvs.append((peer, torch.empty(-(-store.num_nodes // 8), dtype=torch.uint8)))
        self.comm.exchange(sends, recvs, TAG_MASKS).wait()
        return {peer: torch.nonzero(unpack_mask(packed, store.num_nodes)).view(-1) for peer, packed in recvs}

    def sample_level(self, ids: torch.Tensor, fanout: int, key: int, remote: bool = True) -> Level:
        """Samples of the sorted global ``ids`` at one layer, each node's drawn by its owner; ``remote=False``
        promises that every worker's ``ids`` are its own nodes (no exchange at all)."""
        store, comm, rank = self.store, self.comm, self.comm.rank
        bounds = store.bounds(ids)
        replies = {rank: store.sample(ids[bounds[rank]:bounds[rank + 1]] - store.node_start, fanout, key)}
        if not remote:
            if bounds[rank] != 0 or bounds[rank + 1] != ids.numel():
                raise ValueError("sample_level(remote=False) got nodes of other workers")
        elif comm.world > 1:
            asked = self.ask(ids, bounds)
            answers = {peer: store.sample(rows, fanout, key) for peer, rows in asked.items()}
            expected = {peer: bounds[peer + 1] - bounds[peer] for peer in self.peers}
            replies.update(self._reply_in_two(answers, expected) if fanout == ALL_NEIGHBOURS else
                           self._reply(answers, expected, fanout))
        parts = [replies[peer] for peer in sorted(replies)]  # parts own increasing id ranges: the order of ids
        counts = torch.cat([s.counts for s in parts])
        rowptr = torch.zeros(counts.numel() + 1, dtype=torch.long)
        torch.cumsum(counts, 0, out=rowptr[1:])
        return Level(ids, torch.cat([s.degree for s in parts]), torch.cat([s.orig for s in parts]), rowptr,
                     torch.cat([s.neighbours for s in parts]))

    def _reply(self, answers: dict, expected: dict, fanout: int) -> dict[int, Sample]:
        """One reply per peer: ``[degree, orig, count, neighbours padded to the fan-out]`` per node."""
        width = 3 + fanout
        recvs = {peer: torch.empty((m, width), dtype=torch.long) for peer, m in expected.items()}
        self.comm.exchange([(peer, _pack(a, fanout)) for peer, a in answers.items()], list(recvs.items()),
                           TAG_SAMPLES).wait()
        taken = torch.arange(fanout).unsqueeze(0)
        return {peer: Sample(rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3:][taken < rows[:, 2:3]])
                for peer, rows in recvs.items()}

    def _reply_in_two(self, answers: dict, expected: dict) -> dict[int, Sample]:
        """Replies of unbounded length (fan-out ``all``): (degree, orig, count) per node first, then the
        neighbours."""
        metas = {peer: torch.empty((3, m), dtype=torch.long) for peer, m in expected.items()}
        self.comm.exchange([(peer, torch.stack([a.degree, a.orig, a.counts])) for peer, a in answers.items()],
                           list(metas.items()), TAG_SAMPLES).wait()
        nbrs = {peer: torch.empty(int(meta[2].sum()), dtype=torch.long) for peer, meta in metas.items()}
        self.comm.exchange([(peer, a.neighbours) for peer, a in answers.items()], list(nbrs.items()),
                           TAG_NEIGHBOURS).wait()
        return {peer: Sample(meta[0], meta[1], meta[2], nbrs[peer]) for peer, meta in metas.items()}

    def fetch(self, ids: torch.Tensor, features: torch.Tensor, rows_out: torch.Tensor | None = None,
              degree_out: torch.Tensor | None = None) -> FeatureFetch:
        """Post the fetch of the feature rows (and in-degrees) of the sorted global ``ids`` from their owners into
        ``rows_out [len(ids), F]`` and ``degree_out [len(ids)]`` (fresh when not given); the requests are answered
        now, the rows arrive while the caller computes (see :meth:`FeatureFetch.wait`)."""
        store, comm, rank = self.store, self.comm, self.comm.rank
        n = ids.numel()
        x = torch.empty((n, *features.shape[1:]), dtype=features.dtype) if rows_out is None else rows_out
        degree = torch.empty(n, dtype=torch.long) if degree_out is None else degree_out
        bounds = store.bounds(ids)
        own = ids[bounds[rank]:bounds[rank + 1]] - store.node_start
        torch.index_select(features, 0, own, out=x[bounds[rank]:bounds[rank + 1]])
        degree[bounds[rank]:bounds[rank + 1]] = store.degree[own]
        pendings, sent = [], []
        if comm.world > 1:
            asked = self.ask(ids, bounds)
            sent = [(peer, features[rows], store.degree[rows]) for peer, rows in asked.items()]
            pendings.append(comm.exchange([(p, r) for p, r, _ in sent],
                                          [(p, x[bounds[p]:bounds[p + 1]]) for p in self.peers], TAG_ROWS))
            pendings.append(comm.exchange([(p, d) for p, _, d in sent],
                                          [(p, degree[bounds[p]:bounds[p + 1]]) for p in self.peers], TAG_DEGREES))
        return FeatureFetch(x, degree, pendings, sent)


class FeatureFetch:
    """Feature rows and in-degrees of a sorted list of nodes, some local, some in flight from their owners.

    Args:
        rows, degree: the buffers the rows and degrees land in.
        pendings: the posted exchanges.
        sent: the rows this worker serves, kept alive until the exchange completes.
    """

    def __init__(self, rows: torch.Tensor, degree: torch.Tensor, pendings: list[Pending], sent: list):
        self.rows, self.degree, self.pendings, self.sent = rows, degree, pendings, sent

    def wait(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(features [count, F], in-degree [count])`` in the order of the requested ids."""
        for pending in self.pendings:
            pending.wait()
        self.sent = []
        return self.rows, self.degree
