"""Partition statistics the simulator runs on: read from a real partition's manifest.json, or estimated.

For a partition into ``P`` parts the simulator needs, per ordered pair ``(p, q)``:

* ``edges_per_shard[p][q]``: edges whose destination is owned by ``p`` and source by ``q``;
* ``halo_rows[p][q]``: distinct rows of ``q`` that ``p`` needs (what ``q`` sends ``p`` every exchange).

Estimate for graphs too large to partition here (:func:`estimate_partition`): parts of equal size
``n_p = n/P``, a fraction ``phi`` of the ``E`` directed edges crossing parts and spread evenly over the
``P(P-1)`` ordered pairs, so ``c_pq = phi E / (P(P-1))`` and ``e_pp = (1-phi) E / P``. If the ``c_pq``
cut edges fall independently and uniformly on the ``n_p n_q`` (destination, source) pairs, each pair
carries an edge with probability ``rho = c_pq / (n_p n_q)`` and a row of ``q`` is needed by ``p`` when at
least one of its ``n_p`` possible edges into ``p`` exists:

.. math::
    h_{pq} = n_q \\left(1 - (1 - \\rho)^{n_p}\\right) \\approx n_q \\left(1 - e^{-c_{pq}/n_q}\\right)

This is exact in expectation for a random bipartite graph between the two parts and an upper bound for
real graphs, whose skewed degrees and locality repeat sources more often. A random partition has
``phi = (P-1)/P``; METIS on a mesh-like graph has a much smaller ``phi`` (pass it when known).

That uniform split gives every pair and every part the same load, so a ring round, which ends with its slowest
pair, costs what an average pair costs. ``law="metis"`` draws the pairs and the parts' local edges instead from
what METIS did to power-law graphs at increasing part counts (:mod:`sarlab.simulator.workload.pairlaw`): how the edge
cut and the spread of pair sizes grow with ``P``. The OGB presets use it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sarlab.simulator.workload.pairlaw import draw_partition

#: how an estimate spreads the cut edges: evenly over pairs, or drawn from the METIS study
#: (:mod:`sarlab.simulator.workload.pairlaw`)
LAWS = ("uniform", "metis")


@dataclass(frozen=True)
class RelationStats:
    """Per-relation edge and row counts of a typed (heterogeneous) partition with ``R`` relations.

    Args:
        edges: ``[p][q][r]`` edges of relation ``r`` with destination in ``p`` and source in ``q`` (P x P x R).
        rows: ``[p][q][r]`` distinct destination rows of ``p`` those edges reach (P x P x R).
        rows_all: ``[p][r]`` distinct destination rows of ``p`` with an in-edge of relation ``r`` from any part
            (``oneshot``'s merged shard, P x R).
        names: relation names (``head/relation/tail``), when known.
    """

    edges: np.ndarray
    rows: np.ndarray
    rows_all: np.ndarray
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.edges.ndim != 3 or self.edges.shape[0] != self.edges.shape[1] or self.rows.shape != self.edges.shape:
            raise ValueError(f"edges and rows must both be P x P x R, got {self.edges.shape} and {self.rows.shape}")
        if self.rows_all.shape != (self.edges.shape[0], self.edges.shape[2]):
            raise ValueError(f"rows_all must be P x R = {self.edges.shape[::2]}, got {self.rows_all.shape}")

    @property
    def num_relations(self) -> int:
        return int(self.edges.shape[2])


@dataclass(frozen=True)
class PartitionStats:
    """Per-part sizes and per-pair edge and halo counts of one partition.

    Args:
        graph: graph name.
        num_nodes: nodes in the whole graph.
        num_edges: directed edges in the whole graph (as stored: both directions of an undirected edge).
        feature_dim: input feature width ``F``.
        num_classes: number of classes ``C``.
        train_nodes: training nodes in the whole graph.
        nodes_per_part: ``n_p`` for every part.
        edges_per_shard: ``[p][q]`` edges with destination in ``p`` and source in ``q`` (int64 P x P).
        halo_rows: ``[p][q]`` distinct rows of ``q`` needed by ``p``, 0 on the diagonal (int64 P x P).
        source: where the numbers came from (``manifest:PATH`` or ``estimate:...``).
        method: partitioning method (``metis``, ``random``, ``estimate``).
        relations: per-relation counts of a typed graph (:class:`RelationStats`; None: untyped).
    """

    graph: str
    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    train_nodes: int
    nodes_per_part: np.ndarray
    edges_per_shard: np.ndarray
    halo_rows: np.ndarray
    source: str = ""
    method: str = ""
    relations: RelationStats | None = None

    def __post_init__(self) -> None:
        p = len(self.nodes_per_part)
        if self.edges_per_shard.shape != (p, p) or self.halo_rows.shape != (p, p):
            raise ValueError(f"edges_per_shard and halo_rows must be {p} x {p} to match nodes_per_part")
        if self.relations is not None and self.relations.edges.shape[0] != p:
            raise ValueError(f"relations cover {self.relations.edges.shape[0]} parts, the partition {p}")
        if np.any(np.diag(self.halo_rows) != 0):
            raise ValueError("halo_rows must be 0 on the diagonal (a part never needs its own rows as halo)")
        if np.any(self.halo_rows > self.nodes_per_part[None, :]):
            raise ValueError("halo_rows[p][q] cannot exceed the size of part q")

    @property
    def num_parts(self) -> int:
        return int(len(self.nodes_per_part))

    def edge_cut_fraction(self) -> float:
        """Fraction of edges whose endpoints are in different parts."""
        total = float(self.edges_per_shard.sum())
        return 0.0 if total == 0 else 1.0 - float(np.trace(self.edges_per_shard)) / total

    def summary(self) -> dict[str, float]:
        """Headline numbers: parts, cut fraction, mean halo rows per part over mean part size."""
        halo_in = self.halo_rows.sum(axis=1)
        return {
            "parts": self.num_parts,
            "edge_cut": self.edge_cut_fraction(),
            "halo_over_local": float(halo_in.mean() / max(self.nodes_per_part.mean(), 1)),
            "max_halo_rows": int(halo_in.max()),
        }


def even_split(total: int, parts: int) -> np.ndarray:
    """``parts`` near-equal integers summing to ``total`` (the first ``total % parts`` get one more)."""
    base = np.full(parts, total // parts, dtype=np.int64)
    base[: total % parts] += 1
    return base


def load_manifest(path: str | Path) -> PartitionStats:
    """Read a partition directory's ``manifest.json`` (format_version 1) into :class:`PartitionStats`.

    Args:
        path: the partition directory or the manifest file itself.
    """
    path = Path(path)
    manifest_path = path / "manifest.json" if path.is_dir() else path
    if not manifest_path.exists():
        raise FileNotFoundError(f"no manifest.json at {manifest_path}; is this a `sarlab partition` directory?")
    m = json.loads(manifest_path.read_text())
    if m.get("format_version") != 1:
        raise ValueError(f"{manifest_path}: format_version {m.get('format_version')} is not supported (expected 1)")
    ranges = np.asarray(m["node_ranges"], dtype=np.int64)
    return PartitionStats(
        graph=str(m.get("graph", manifest_path.parent.name)),
        num_nodes=int(m["num_nodes"]),
        num_edges=int(m["num_edges"]),
        feature_dim=int(m["feature_dim"]),
        num_classes=int(m["num_classes"]),
        train_nodes=int(m.get("train_nodes", 0)),
        nodes_per_part=ranges[:, 1] - ranges[:, 0],
        edges_per_shard=np.asarray(m["edges_per_shard"], dtype=np.int64),
        halo_rows=np.asarray(m["halo_rows"], dtype=np.int64),
        source=f"manifest:{manifest_path}",
        method=str(m.get("method", "")),
        relations=read_relation_stats(manifest_path.parent, len(ranges), int(m["num_relations"]),
                                      tuple(m.get("relation_names", ())))
        if "num_relations" in m else None,
    )


def read_relation_stats(directory: Path, num_parts: int, num_relations: int, names: tuple[str, ...] = ()
                        ) -> RelationStats:
    """Per-relation counts of a typed partition from its parts' ``edge_ptr``, ``edge_dst`` and ``edge_type``
    arrays (numpy files; a part's in-edges grouped by source part, ``edge_ptr`` the group boundaries).

    Args:
        directory: the partition directory.
        num_parts: ``P``.
        num_relations: ``R`` (the manifest's ``num_relations``).
        names: relation names.
    """
    shape = (num_parts, num_parts, num_relations)
    edges, rows, rows_all = np.zeros(shape), np.zeros(shape), np.zeros((num_parts, num_relations))
    for p in range(num_parts):
        part = directory / f"part{p}"
        try:
            ptr, dst, etype = (np.load(part / f"{name}.npy") for name in ("edge_ptr", "edge_dst", "edge_type"))
        except FileNotFoundError as missing:
            raise FileNotFoundError(f"typed partition {directory}: {missing.filename} is missing; partition the "
                                    "graph again with `sarlab partition`") from None
        key = etype.astype(np.int64) * (int(dst.max(initial=0)) + 1) + dst  # (relation, destination row) pairs
        for r in range(num_relations):
            rows_all[p, r] = np.unique(dst[etype == r]).size
        for q in range(num_parts):
            lo, hi = int(ptr[q]), int(ptr[q + 1])
            edges[p, q] = np.bincount(etype[lo:hi], minlength=num_relations)[:num_relations]
            distinct = np.unique(key[lo:hi]) // (int(dst.max(initial=0)) + 1)
            rows[p, q] = np.bincount(distinct, minlength=num_relations)[:num_relations]
    return RelationStats(edges, rows, rows_all, names)


def expected_distinct_sources(cut_edges: np.ndarray, dst_nodes: np.ndarray, src_nodes: np.ndarray) -> np.ndarray:
    """Expected distinct source rows among random cut edges between two parts.

    .. math::
        h = n_q \\left(1 - (1 - c / (n_p n_q))^{n_p}\\right)

    Args:
        cut_edges: ``c_pq`` edges (array, broadcastable).
        dst_nodes: ``n_p`` nodes of the destination part.
        src_nodes: ``n_q`` nodes of the source part.
    """
    c = np.asarray(cut_edges, dtype=np.float64)
    n_p = np.asarray(dst_nodes, dtype=np.float64)
    n_q = np.asarray(src_nodes, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.clip(np.where(n_p * n_q > 0, c / (n_p * n_q), 0.0), 0.0, 1.0)
        # (1 - rho)^n_p computed as exp(n_p log1p(-rho)) for accuracy when rho is tiny
        absent = np.where(rho >= 1.0, 0.0, np.exp(n_p * np.log1p(-np.minimum(rho, 1.0 - 1e-300))))
    return n_q * (1.0 - absent)


def estimate_partition(
    num_nodes: int,
    num_edges: int,
    num_parts: int,
    feature_dim: int,
    num_classes: int,
    edge_cut: float | None = None,
    train_nodes: int = 0,
    graph: str = "estimate",
    law: str = "uniform",
    seed: int = 0,
) -> PartitionStats:
    """Partition statistics of an equal-size partition estimated from totals (see the module docstring).

    Args:
        num_nodes: ``n``.
        num_edges: directed edges ``E``.
        num_parts: ``P``.
        feature_dim: ``F``.
        num_classes: ``C``.
        edge_cut: fraction ``phi`` of edges crossing parts; ``None`` = random partition, ``(P-1)/P``.
        train_nodes: training nodes (whole graph).
        graph: name.
        law: :data:`LAWS`: ``uniform`` (the formula above) or ``metis``
            (:func:`sarlab.simulator.workload.pairlaw.draw_partition`;
            ``edge_cut=None`` then means the law's METIS cut, not a random partition).
        seed: the ``metis`` law's draw.
    """
    if law not in LAWS:
        raise ValueError(f"law must be one of {LAWS}, got {law!r}")
    if num_parts < 1 or num_nodes < num_parts:
        raise ValueError(f"need 1 <= num_parts <= num_nodes, got num_parts={num_parts}, num_nodes={num_nodes}")
    phi = (num_parts - 1) / num_parts if edge_cut is None else float(edge_cut)
    if not 0.0 <= phi <= 1.0:
        raise ValueError(f"edge_cut must be in [0, 1], got {phi}")
    if num_parts == 1:
        phi = 0.0
    if law == "metis":
        nodes, edges, halo, what = draw_partition(num_nodes, num_edges, num_parts, edge_cut, seed)
        return PartitionStats(
            graph=graph, num_nodes=int(num_nodes), num_edges=int(num_edges), feature_dim=int(feature_dim),
            num_classes=int(num_classes), train_nodes=int(train_nodes), nodes_per_part=nodes,
            edges_per_shard=edges, halo_rows=halo,
            source=f"estimate:nodes={num_nodes},edges={num_edges},parts={num_parts},{what}", method=what,
        )  # fmt: skip
    nodes = even_split(num_nodes, num_parts)
    local = (1.0 - phi) * num_edges / num_parts
    cross = phi * num_edges / (num_parts * (num_parts - 1)) if num_parts > 1 else 0.0
    edges = np.full((num_parts, num_parts), cross)
    np.fill_diagonal(edges, local)
    halo = expected_distinct_sources(edges, nodes[:, None], nodes[None, :])
    np.fill_diagonal(halo, 0.0)
    method = "random" if edge_cut is None else f"cut={phi:g}"
    return PartitionStats(
        graph=graph,
        num_nodes=int(num_nodes),
        num_edges=int(num_edges),
        feature_dim=int(feature_dim),
        num_classes=int(num_classes),
        train_nodes=int(train_nodes),
        nodes_per_part=nodes,
        edges_per_shard=np.rint(edges).astype(np.int64),
        halo_rows=np.minimum(np.rint(halo).astype(np.int64), nodes[None, :]),
        source=f"estimate:nodes={num_nodes},edges={num_edges},parts={num_parts},cut={phi:.4g}",
        method=f"estimate({method})",
    )


@dataclass(frozen=True)
class GraphPreset:
    """Published size of a benchmark graph (OGB leaderboard figures).

    Args:
        name: OGB name.
        num_nodes: nodes.
        num_edges: directed edges as used for full-batch training.
        feature_dim: input features.
        num_classes: classes.
        train_nodes: size of the official training split.
        note: how the edge count is counted.
    """

    name: str
    num_nodes: int
    num_edges: int
    feature_dim: int
    num_classes: int
    train_nodes: int
    note: str = ""

    def estimate(self, num_parts: int, edge_cut: float | None = None, law: str = "metis") -> PartitionStats:
        """:func:`estimate_partition` for this graph (by default with the METIS pair-size law)."""
        return estimate_partition(
            self.num_nodes,
            self.num_edges,
            num_parts,
            self.feature_dim,
            self.num_classes,
            edge_cut=edge_cut,
            train_nodes=self.train_nodes,
            graph=self.name,
            law=law,
        )


GRAPH_PRESETS: dict[str, GraphPreset] = {
    "ogbn-products": GraphPreset(
        "ogbn-products",
        2_449_029,
        2 * 61_859_140,
        100,
        47,
        196_615,
        note="61,859,140 undirected edges stored as 123,718,280 directed",
    ),
    "ogbn-papers100M": GraphPreset(
        "ogbn-papers100M",
        111_059_956,
        1_615_685_872,
        128,
        172,
        1_207_179,
        note="1,615,685,872 directed edges as stored (pass edges=... to symmetrise: 2x)",
    ),
}


def resolve_workload(spec: str, num_parts: int, edge_cut: float | None = None) -> PartitionStats:
    """Partition statistics from a spec string.

    Specs: a partition directory (its ``manifest.json``; ``num_parts`` must match), a preset name
    (``ogbn-products``, ``ogbn-papers100M``; METIS pair-size law, ``ogbn-products:uniform`` for the even
    split), or ``estimate:nodes=N,edges=E,features=F,classes=C[,train=T][,cut=PHI][,name=S][,law=metis]``.

    Args:
        spec: the workload spec.
        num_parts: ``P`` (number of workers).
        edge_cut: edge-cut fraction for presets and estimates (``None`` = random partition).
    """
    name, _, law = spec.partition(":")
    if name in GRAPH_PRESETS and law in ("", *LAWS):
        return GRAPH_PRESETS[name].estimate(num_parts, edge_cut, law or "metis")
    if spec.startswith("estimate:"):
        fields: dict[str, str] = {}
        for item in spec[len("estimate:") :].split(","):
            if item:
                key, _, value = item.partition("=")
                fields[key.strip()] = value.strip()
        try:
            cut = float(fields["cut"]) if "cut" in fields else edge_cut
            return estimate_partition(
                int(float(fields["nodes"])),
                int(float(fields["edges"])),
                num_parts,
                int(fields["features"]),
                int(fields["classes"]),
                edge_cut=cut,
                train_nodes=int(float(fields.get("train", 0))),
                graph=fields.get("name", "estimate"),
                law=fields.get("law", "uniform"),
            )
        except KeyError as missing:
            raise ValueError(
                f"estimate spec {spec!r} lacks {missing}; write estimate:nodes=N,edges=E,features=F,classes=C"
            ) from None
    path = Path(spec)
    if path.exists():
        stats = load_manifest(path)
        if stats.num_parts != num_parts:
            raise ValueError(
                f"{spec} holds {stats.num_parts} parts but {num_parts} workers were asked for; "
                "partition again with that many parts or use an estimate: spec"
            )
        return stats
    raise ValueError(
        f"workload {spec!r} is not a partition directory, a preset ({', '.join(GRAPH_PRESETS)}) or an estimate: spec"
    )
