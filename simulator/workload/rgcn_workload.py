"""Typed partitions too large to partition here: per-relation counts estimated from a relation mix; ogbn-mag;
the counts an R-GCN is priced with (:func:`relations_for`).

A relation ``r`` carries a share ``s_r`` of the edges and its destinations are nodes of one type, a share ``t_r`` of
all nodes (spread over the parts like the nodes). Without more knowledge every shard carries the graph's mix,
and the edges of a relation reach its destination rows at random (:func:`sarlab.simulator.workload.ops.active_rows`):

.. math::
    e_{pqr} = s_r\\,e_{pq}, \\qquad m_{pqr} = t_r n_p \\left(1 - e^{-e_{pqr} / (t_r n_p)}\\right), \\qquad
    m^{all}_{pr} = t_r n_p \\left(1 - e^{-\\sum_q e_{pqr} / (t_r n_p)}\\right)

(an upper bound on the rows of a skewed real graph, which repeats destinations more often). On the measured
60,000-node ogbn-mag-like partitions this is checked against the real counts (``simulator/studies/fig7.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.ops import active_rows
from sarlab.simulator.workload.workload import GraphPreset, PartitionStats, RelationStats

#: ogbn-mag (OGB statistics): nodes per type and each relation's (head, relation, tail) and edges
MAG_NODES = {"author": 1_134_649, "field_of_study": 59_965, "institution": 8_740, "paper": 736_389}
MAG_RELATIONS = (("author", "affiliated_with", "institution", 1_043_998), ("author", "writes", "paper", 7_145_660),
                 ("paper", "cites", "paper", 5_416_271), ("paper", "has_topic", "field_of_study", 7_505_078))


@dataclass(frozen=True)
class RelationMix:
    """A typed graph's relations: names, edge shares ``s_r`` and destination-type node shares ``t_r``."""

    names: tuple[str, ...]
    edge_share: tuple[float, ...]
    dst_share: tuple[float, ...]

    def __post_init__(self) -> None:
        if not len(self.names) == len(self.edge_share) == len(self.dst_share) or not self.names:
            raise ValueError("a relation mix needs as many names, edge shares and destination shares (>= 1)")
        if abs(sum(self.edge_share) - 1.0) > 1e-6 or not all(0 < t <= 1 for t in self.dst_share):
            raise ValueError("edge shares must sum to 1 and destination shares lie in (0, 1]")


def mag_mix(reverse: bool = True) -> RelationMix:
    """ogbn-mag's four relations (messages flow head -> tail) and, with ``reverse``, their reverses (as OGB's and
    DGL's R-GCN examples add them, and as ``hetero:...,reverse=1`` does)."""
    total_nodes = sum(MAG_NODES.values())
    rels = [(f"{h}/{r}/{t}", e, MAG_NODES[t]) for h, r, t, e in MAG_RELATIONS]
    if reverse:
        rels += [(f"{t}/rev_{r}/{h}", e, MAG_NODES[h]) for h, r, t, e in MAG_RELATIONS]
    edges = sum(e for _, e, _ in rels)
    return RelationMix(tuple(n for n, _, _ in rels), tuple(e / edges for _, e, _ in rels),
                       tuple(k / total_nodes for _, _, k in rels))


def ogbn_mag(reverse: bool = True) -> GraphPreset:
    """ogbn-mag as the engine sees it: 128 paper features plus a 4-column node-type one-hot, 349 classes, the
    629,571 training papers; edges both ways with ``reverse``."""
    edges = sum(e for *_, e in MAG_RELATIONS) * (2 if reverse else 1)
    return GraphPreset("ogbn-mag", sum(MAG_NODES.values()), edges, 128 + len(MAG_NODES), 349, 629_571,
                       note="21,111,007 edges of 4 relations" + (", each with its reverse (8 relations)" if reverse
                                                                else ""))


def estimate_relations(stats: PartitionStats, mix: RelationMix) -> RelationStats:
    """Per-relation counts of ``stats``' shards drawn with the graph's relation mix (module docstring)."""
    share = np.asarray(mix.edge_share, dtype=np.float64)
    dst = np.asarray(mix.dst_share, dtype=np.float64)
    n = stats.nodes_per_part.astype(np.float64)
    edges = stats.edges_per_shard.astype(np.float64)[:, :, None] * share
    targets = np.maximum(n[:, None, None] * dst, 1.0)
    rows = active_rows(edges, targets)
    rows_all = active_rows(edges.sum(axis=1), targets[:, 0, :])
    return RelationStats(edges, rows, rows_all, mix.names)


def with_relation_mix(stats: PartitionStats, mix: RelationMix) -> PartitionStats:
    """``stats`` with estimated per-relation counts (:func:`estimate_relations`)."""
    return replace(stats, relations=estimate_relations(stats, mix),
                   source=stats.source + f",relations=estimated({len(mix.names)})")


def mag_partition(num_parts: int, reverse: bool = True, edge_cut: float | None = None) -> PartitionStats:
    """An ogbn-mag partition into ``num_parts`` parts: the METIS pair-size law
    (:mod:`sarlab.simulator.workload.pairlaw`) for the pairs, the relation mix of :func:`mag_mix` for the relations."""
    return with_relation_mix(ogbn_mag(reverse).estimate(num_parts, edge_cut), mag_mix(reverse))


def uniform_mix(num_relations: int) -> RelationMix:
    """``R`` relations with equal shares of the edges, each reaching any node: an untyped graph's edges split evenly
    (``s_r = 1 / R``, ``t_r = 1``)."""
    if num_relations < 1:
        raise ValueError(f"a relation mix needs >= 1 relations, got {num_relations}")
    return RelationMix(tuple(f"r{r}" for r in range(num_relations)), (1.0 / num_relations,) * num_relations,
                       (1.0,) * num_relations)


def relations_for(stats: PartitionStats, model: ModelSpec) -> RelationStats | None:
    """The per-relation counts an R-GCN ``model`` is priced with on ``stats`` (other models: None).

    A typed partition's own counts (their number must be ``model.relations``); an untyped one's edges split evenly
    over ``model.relations`` relations (:func:`uniform_mix`; one relation: None, its edges reaching rows at random).
    """
    if model.model != "rgcn":
        return None
    if stats.relations is not None:
        if stats.relations.num_relations != model.relations:
            raise ValueError(f"{stats.graph} has {stats.relations.num_relations} relations but the R-GCN was given "
                             f"{model.relations}; pass relations={stats.relations.num_relations} (sarlab simulate "
                             f"--relations {stats.relations.num_relations})")
        return stats.relations
    return estimate_relations(stats, uniform_mix(model.relations)) if model.relations > 1 else None
