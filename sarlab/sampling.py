"""Distributed neighbour sampling: a worker's graph and feature store, and a sampler that crosses partitions.

Each worker holds its partition's in-edges (the :class:`GraphStore`: a CSR over its own nodes whose columns are
the neighbours' global ids, the renumbered ids of :mod:`sarlab.partition`, and their original ids) and its nodes'
features. A node is sampled by its owner: a worker asks every peer, in one message per peer and hop, for the
samples of the frontier nodes that peer owns, and the owner answers with each node's in-degree, original id and
sampled neighbours (DistDGL's scheme; PyG's ``torch_geometric.distributed`` does the same over RPC). Features of
the input nodes are fetched from their owners the same way, the reply posted without waiting for it
(:class:`FeatureFetch`), so that it can overlap the computation of the mini-batch before.

**Semantics.** Node ``v`` at layer ``l`` of epoch ``e`` gets ``min(k, deg v)`` of its in-edges, uniformly without
replacement, by Floyd's algorithm over the positions of its in-edges listed in the order of their sources'
original ids: draw ``i = 0..k-1`` takes ``t`` uniform in ``[0, d - k + i]`` from ``hash(seed, e, l, orig(v), i)``
and keeps ``t``, or ``d - k + i`` when ``t`` was taken already (every ``k``-subset equally likely). Order and draws
depend on original ids only, so a node's sample is the same whichever worker owns it and for any number of
workers; it is also the same in every mini-batch of the epoch that needs it. Fan-out ``all`` takes every in-edge.

**Transport.** The existing point-to-point layer (:meth:`sarlab.comm.Comm.exchange`, gloo ``batch_isend_irecv``)
on a process group of its own, so that a feature fetch in flight never shares tags with the trainer's
all-reduces. Every worker runs the same number of hops and steps, so each exchange is an all-to-all that every
worker joins, with a size exchange first where the receiver cannot know the size. (torch RPC works on this torch
with TensorPipe, but needs its own rendezvous and transport set-up inside the emulated networks, runs a thread
pool in every worker and is not counted by :class:`~sarlab.comm.CommStats`; batched per hop, lock-step requests
gain nothing from its asynchrony.)
"""
from __future__ import annotations

from typing import NamedTuple

import torch

from .comm import Comm, Pending
from .config import ALL_NEIGHBOURS
from .partition import Partition

# tags of the sampler's messages (its own process group; distinct kinds never match each other)
TAG_SIZES, TAG_REQUEST, TAG_META, TAG_NEIGHBOURS, TAG_ROWS, TAG_DEGREES, TAG_SETUP = 21, 22, 23, 24, 25, 26, 27

_MASK32 = 0xFFFFFFFF


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

    def owner(self, ids: torch.Tensor) -> torch.Tensor:
        """The part that owns each global id."""
        return torch.searchsorted(self.node_starts, ids, right=True) - 1

    def sample(self, rows: torch.Tensor, fanout: int, key: int) -> Sample:
        """Samples of the local ``rows``: ``min(fanout, degree)`` in-edges each, uniformly without replacement
        (Floyd's algorithm, see the module docstring); ``fanout`` :data:`~sarlab.config.ALL_NEIGHBOURS` takes all."""
        degree, orig = self.degree[rows], self.orig_ids[rows]
        counts = degree if fanout == ALL_NEIGHBOURS else degree.clamp(max=fanout)
        seg, offset = segments(counts)
        big = degree > counts  # nodes that keep fanout of their in-edges
        if bool(big.any()):
            positions = floyd_positions(degree[big], fanout, node_keys(key, orig[big]))
            where = big[seg]
            rank_of_big = torch.cumsum(big, 0) - 1
            offset = offset.clone()
            offset[where] = positions[rank_of_big[seg[where]], offset[where]]
        return Sample(degree, orig, counts, self.neighbours[self.rowptr[rows][seg] + offset])


def floyd_positions(degree: torch.Tensor, k: int, keys: torch.Tensor) -> torch.Tensor:
    """``[m, k]``: ``k`` distinct positions in ``[0, degree)`` per row (every ``degree > k``), uniformly without
    replacement, by Floyd's algorithm with draw ``i`` from ``hash(keys, i)``."""
    chosen = torch.empty((degree.numel(), k), dtype=torch.long)
    for i in range(k):
        top = degree - k + i  # draw i takes t uniform in [0, top]
        t = (_mix32(_mix32(keys ^ i) ^ 0x5BD1E995) * (top + 1)) >> 32
        if i:
            t = torch.where((chosen[:, :i] == t.unsqueeze(1)).any(1), top, t)
        chosen[:, i] = t
    return chosen


def exchange_sizes(comm: Comm, counts: dict[int, int]) -> dict[int, int]:
    """Tell every peer how many items it will get from me; returns how many I get from each."""
    sends = [(peer, torch.tensor([counts.get(peer, 0)], dtype=torch.long)) for peer in range(comm.world)
             if peer != comm.rank]
    recvs = [(peer, torch.empty(1, dtype=torch.long)) for peer in range(comm.world) if peer != comm.rank]
    comm.exchange(sends, recvs, TAG_SIZES).wait()
    return {peer: int(t[0]) for peer, t in recvs}


def all_to_all(comm: Comm, sends: dict[int, torch.Tensor], recv_sizes: dict[int, int], tag: int,
               tail: tuple = (), dtype: torch.dtype = torch.long) -> tuple[dict[int, torch.Tensor], Pending]:
    """Post ``sends[peer]`` to every peer and receive ``recv_sizes[peer]`` rows from each (not waited)."""
    recvs = {peer: torch.empty((size, *tail), dtype=dtype) for peer, size in recv_sizes.items()}
    pending = comm.exchange(list(sends.items()), list(recvs.items()), tag)
    return recvs, pending


class Requests(NamedTuple):
    """Items grouped by owner: ``positions[peer]`` where peer's items sit in the original order, and ``ids``."""

    positions: dict
    ids: dict


def group_by_owner(store: GraphStore, ids: torch.Tensor) -> Requests:
    """``ids`` grouped by the part that owns them (every part present, possibly empty)."""
    owner = store.owner(ids)
    order = torch.argsort(owner, stable=True)
    counts = torch.bincount(owner, minlength=store.node_starts.numel() - 1).tolist()
    positions, groups, first = {}, {}, 0
    for peer, count in enumerate(counts):
        positions[peer] = order[first:first + count]
        groups[peer] = ids[positions[peer]]
        first += count
    return Requests(positions, groups)


def request(comm: Comm, requests: Requests) -> dict[int, torch.Tensor]:
    """Send every peer the ids I want from it; returns the ids each peer wants from me (blocking)."""
    if comm.world == 1:
        return {}
    wanted = {peer: ids for peer, ids in requests.ids.items() if peer != comm.rank}
    sizes = exchange_sizes(comm, {peer: ids.numel() for peer, ids in wanted.items()})
    received, pending = all_to_all(comm, wanted, sizes, TAG_REQUEST)
    pending.wait()
    return received


class Hop(NamedTuple):
    """One hop for ``m`` frontier nodes: their in-degree and original id, and the sampled edges as (position of
    the destination in the frontier, global id of the source)."""

    degree: torch.Tensor
    orig: torch.Tensor
    edge_dst: torch.Tensor
    edge_src: torch.Tensor


def _pack(sample: Sample, fanout: int) -> torch.Tensor:
    """``[m, 3 + fanout]``: degree, original id, count and the neighbours (padded with -1) of every node."""
    out = torch.full((sample.degree.numel(), 3 + fanout), -1, dtype=torch.long)
    out[:, 0], out[:, 1], out[:, 2] = sample.degree, sample.orig, sample.counts
    seg, offset = segments(sample.counts)
    out[seg, 3 + offset] = sample.neighbours
    return out


def _reply_in_two(comm: Comm, answers: dict, sizes: dict) -> dict:
    """Replies of unbounded length (fan-out ``all``): per node (degree, orig, count) first, then the neighbours."""
    metas, pending = all_to_all(comm, {peer: torch.stack([a.degree, a.orig, a.counts]) for peer, a in answers.items()},
                                {peer: 3 * m for peer, m in sizes.items()}, TAG_META)
    pending.wait()
    metas = {peer: meta.view(3, sizes[peer]) for peer, meta in metas.items()}  # received flat as [3 m]
    nbrs, pending = all_to_all(comm, {peer: a.neighbours for peer, a in answers.items()},
                               {peer: int(meta[2].sum()) for peer, meta in metas.items()}, TAG_NEIGHBOURS)
    pending.wait()
    return {peer: Sample(meta[0], meta[1], meta[2], nbrs[peer]) for peer, meta in metas.items()}


class DistSampler:
    """Samples hops and fetches rows across partitions; every worker calls the same methods in the same order.

    Args:
        store: this worker's :class:`GraphStore`.
        comm: a :class:`~sarlab.comm.Comm` on the sampler's own process group (or world 1).
    """

    def __init__(self, store: GraphStore, comm: Comm):
        self.store, self.comm = store, comm

    def hop(self, frontier: torch.Tensor, fanout: int, key: int) -> Hop:
        """Sample every frontier node (global ids) at its owner."""
        store, comm, rank = self.store, self.comm, self.comm.rank
        requests = group_by_owner(store, frontier)
        asked = request(comm, requests)
        answers = {peer: store.sample(ids - store.node_start, fanout, key) for peer, ids in asked.items()}
        own = store.sample(requests.ids[rank] - store.node_start, fanout, key)
        replies = {rank: own}
        if comm.world > 1:
            sizes = {peer: requests.ids[peer].numel() for peer in asked}
            if fanout == ALL_NEIGHBOURS:
                replies.update(_reply_in_two(comm, answers, sizes))
            else:  # one reply per peer: [degree, orig, count, neighbours padded to the fan-out] per node
                width = 3 + fanout
                packed, pending = all_to_all(comm, {peer: _pack(a, fanout) for peer, a in answers.items()},
                                             {peer: m * width for peer, m in sizes.items()}, TAG_META)
                pending.wait()
                for peer, flat in packed.items():
                    rows = flat.view(sizes[peer], width)
                    taken = torch.arange(fanout).unsqueeze(0) < rows[:, 2:3]
                    replies[peer] = Sample(rows[:, 0], rows[:, 1], rows[:, 2], rows[:, 3:][taken])
        degree = torch.zeros(frontier.numel(), dtype=torch.long)
        orig = torch.zeros(frontier.numel(), dtype=torch.long)
        edge_dst, edge_src = [], []
        for peer, sample in sorted(replies.items()):
            positions = requests.positions[peer]
            degree[positions], orig[positions] = sample.degree, sample.orig
            edge_dst.append(torch.repeat_interleave(positions, sample.counts))
            edge_src.append(sample.neighbours)
        return Hop(degree, orig, torch.cat(edge_dst), torch.cat(edge_src))

    def fetch(self, ids: torch.Tensor, features: torch.Tensor) -> FeatureFetch:
        """Post the fetch of the feature rows (and in-degrees) of global ``ids`` from their owners; the requests go
        out and are answered now, the rows arrive while the caller computes (see :meth:`FeatureFetch.wait`)."""
        store, comm, rank = self.store, self.comm, self.comm.rank
        requests = group_by_owner(store, ids)
        asked = request(comm, requests)
        own_rows = requests.ids[rank] - store.node_start
        pendings, rows, degrees, sent = [], {}, {}, []
        if comm.world > 1:
            served = {peer: wanted - store.node_start for peer, wanted in asked.items()}
            sizes = {peer: requests.ids[peer].numel() for peer in asked}
            sent = [{p: features[r] for p, r in served.items()}, {p: store.degree[r] for p, r in served.items()}]
            rows, pending = all_to_all(comm, sent[0], sizes, TAG_ROWS, tuple(features.shape[1:]), features.dtype)
            pendings.append(pending)
            degrees, pending = all_to_all(comm, sent[1], sizes, TAG_DEGREES)
            pendings.append(pending)
        fetch = FeatureFetch(ids.numel(), requests.positions, features[own_rows], store.degree[own_rows], rows,
                             degrees, pendings, rank)
        fetch.sent = sent  # the rows I serve stay alive until the exchange completes
        return fetch


class FeatureFetch:
    """Feature rows and in-degrees of a list of nodes, some local, some in flight from their owners."""

    def __init__(self, count: int, positions: dict, own_rows: torch.Tensor, own_degree: torch.Tensor, rows: dict,
                 degrees: dict, pendings: list, rank: int):
        self.count, self.positions, self.rank = count, positions, rank
        self.own_rows, self.own_degree, self.rows, self.degrees, self.pendings = (own_rows, own_degree, rows, degrees,
                                                                                  pendings)
        self.sent: list = []

    def wait(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(features [count, F], in-degree [count])`` in the order of the requested ids."""
        for pending in self.pendings:
            pending.wait()
        self.sent = []
        x = torch.empty((self.count, *self.own_rows.shape[1:]), dtype=self.own_rows.dtype)
        degree = torch.empty(self.count, dtype=torch.long)
        x[self.positions[self.rank]] = self.own_rows
        degree[self.positions[self.rank]] = self.own_degree
        for peer, received in self.rows.items():
            x[self.positions[peer]] = received
            degree[self.positions[peer]] = self.degrees[peer]
        return x, degree
