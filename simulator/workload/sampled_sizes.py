"""Expected sizes of sampled neighbourhoods (``--mode sampling``) from a degree distribution and a partition.

**A seed set.** A graph with ``n_j`` nodes of in-degree ``d_j`` (``n = sum n_j``, ``E = sum n_j d_j`` directed
edges, stored in both directions). ``s`` seeds, training nodes drawn uniformly, make a node of class ``j`` a seed
with probability ``pi_L(j) = s / n``. Hop ``h`` (fan-out ``k``, ``all`` = every in-edge) samples ``c_j = min(k,
d_j)`` in-edges of every node of the level above, so

.. math::
    m_h = \\sum_j n_j\\, \\pi(j)\\, c_j, \\qquad
    \\pi'(j) = 1 - \\big(1 - \\pi(j)\\big)\\Big(1 - \\frac{d_j}{E}\\Big)^{m_h}, \\qquad |S| = \\sum_j n_j \\pi'(j)

(an edge's source is node ``v`` with probability ``d_v / E`` on a symmetric graph, so hubs join first). Every hop
samples the whole level again (a layer's samples are keyed by the layer), and a node that an earlier hop added
along one (tree) edge draws that edge again with probability ``c_j / d_j`` from its own end, and its parent draws
it with the frontier's mean ``c / d`` (weighted by draws): those draws add nothing, so only ``m_h`` minus them
enter :math:`\\pi'`; the rest are treated as independent (within a few % of a brute-force sampler on
configuration-model graphs, ``tests/test_simulator_strategies.py``; an upper bound where communities repeat
sources). The new level holds the old one plus the sources sampled.

**A round of batches** (:mod:`sarlab.training.minibatch`): a node's sample depends on (seed, epoch, layer, node) only,
so the union of the neighbourhoods of a round's batches is the sampled neighbourhood of the union of their seeds: the
same formula with ``s`` = the round's seeds gives the rows and edges a round samples and fetches, and with ``s`` =
one batch's seeds the blocks one step computes on.

**Remote rows.** Of part ``p``'s in-edges a fraction ``a_p = e_pp / in_p`` has a local source; of the other
parts' in-edges a fraction ``b_p = sum_{q != p} e_qp / sum_{q != p} in_q`` has its source in ``p``. A hop whose
draws start from own nodes with weight ``w_own`` lands on an own node with probability ``x = (w_own a_p +
w_other b_p) / m_h`` (a two-state chain over the partition's edge matrix); own (a share ``f = n_p / n`` of every
degree class) and other nodes are tracked apart in :math:`\\pi`, so a side the levels have mostly taken adds
fewer new rows.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sarlab.simulator.workload.workload import PartitionStats


@dataclass(frozen=True)
class DegreeDistribution:
    """In-degrees as a histogram: ``counts[j]`` nodes have in-degree ``degrees[j]``."""

    degrees: np.ndarray
    counts: np.ndarray

    @classmethod
    def from_degrees(cls, degrees: np.ndarray) -> DegreeDistribution:
        """The histogram of one in-degree per node."""
        values, counts = np.unique(np.asarray(degrees, dtype=np.int64), return_counts=True)
        return cls(values.astype(np.float64), counts.astype(np.float64))

    @classmethod
    def power_law(cls, nodes: int, mean_degree: float, power: float = 2.5, seed: int = 0) -> DegreeDistribution:
        """An assumed law where no graph is at hand: Poisson degrees with power-law means ``theta ~ 1 +
        Pareto(power - 1)`` scaled to ``mean_degree`` (the law of ``sarlab.data.graphs.synthetic_graph``'s weights),
        drawn for ``min(nodes, 200000)`` nodes and scaled to ``nodes``."""
        rng = np.random.default_rng(seed)
        m = int(min(nodes, 200_000))
        theta = np.minimum(1.0 + rng.pareto(max(power - 1.0, 0.1), size=m), nodes / 10.0 + 1.0)
        degrees = rng.poisson(mean_degree * theta / theta.mean())
        hist = cls.from_degrees(degrees)
        return cls(hist.degrees, hist.counts * (nodes / m))

    @property
    def nodes(self) -> float:
        return float(self.counts.sum())

    @property
    def edges(self) -> float:
        return float((self.counts * self.degrees).sum())


def degrees_from_partition(path: str | Path) -> DegreeDistribution:
    """In-degrees of every node of a ``sarlab partition`` directory (each part's ``edge_dst.npy``, read with
    numpy: the destination rows of its in-edges)."""
    path = Path(path)
    parts = sorted(p for p in path.glob("part*") if p.is_dir())
    if not parts:
        raise FileNotFoundError(f"{path} has no part*/ directories; is it a `sarlab partition` directory?")
    degrees = []
    for part in parts:
        dst = np.load(part / "edge_dst.npy", allow_pickle=False)
        rows = len(np.load(part / "orig_ids.npy", allow_pickle=False, mmap_mode="r"))
        degrees.append(np.bincount(dst.astype(np.int64), minlength=rows))
    return DegreeDistribution.from_degrees(np.concatenate(degrees))


def train_nodes_per_part(stats: PartitionStats, path: str | Path | None = None) -> np.ndarray:
    """Training nodes of every part: counted in the partition's ``train_mask.npy`` files, else ``train_nodes``
    spread in proportion to the parts' sizes (all nodes when the statistics know no training nodes)."""
    if path is not None and Path(path).is_dir():
        parts = sorted(p for p in Path(path).glob("part*") if p.is_dir())
        if len(parts) == stats.num_parts:
            return np.array([float(np.load(p / "train_mask.npy", allow_pickle=False).sum()) for p in parts])
    total = stats.train_nodes or stats.num_nodes
    return total * stats.nodes_per_part / max(float(stats.nodes_per_part.sum()), 1.0)


@dataclass(frozen=True)
class SampledSizes:
    """Expected sizes of the sampled neighbourhood of one worker's seed set (a batch or a round): ``rows[l]`` =
    ``|S_l|`` (``rows[L]`` the seeds), ``edges[l]`` sampled edges of layer ``l``, ``local[l]`` the fraction of
    ``S_l`` owned by the worker."""

    rows: np.ndarray
    edges: np.ndarray
    local: np.ndarray

    @property
    def remote_inputs(self) -> float:
        """Input rows fetched from other workers."""
        return float(self.rows[0] * (1.0 - self.local[0]))

    def remote_rows(self, layer: int) -> float:
        """Rows of ``S_layer`` owned by other workers."""
        return float(self.rows[layer] * (1.0 - self.local[layer]))


def sampled_sizes(deg: DegreeDistribution, seeds: float, fanouts: tuple[int, ...], local_keep: float = 1.0,
                  remote_in: float = 0.0, local_share: float = 1.0) -> SampledSizes:
    """Expected ``|S_l|``, sampled edges and local fractions of the neighbourhood of ``seeds`` seeds (module
    docstring).

    The worker's own nodes (a share ``f`` of every degree class) and the others' are tracked apart: a draw lands
    on the own side with the chain's probability and then on a given own node of degree ``d`` with probability
    ``d / (f E)``, so a side that the levels have mostly taken already adds fewer new rows.

    Args:
        deg: the graph's in-degree histogram.
        seeds: seeds ``s`` (the worker's own nodes): one batch's, or a round's (the union of its batches').
        fanouts: hop 1 (the last layer) first, -1 = all.
        local_keep: ``a_p``, local fraction of a local node's in-edges.
        remote_in: ``b_p``, fraction of a remote node's in-edges whose source is local.
        local_share: ``f = n_p / n``, the worker's share of the nodes (1 = one worker).
    """
    d, n_j, E = deg.degrees, deg.counts, max(deg.edges, 1.0)
    layers = len(fanouts)
    f = min(max(local_share, 1e-12), 1.0)
    sides = (f, 1.0 - f)  # own nodes, the others'
    pis = [np.full_like(d, min(1.0, seeds / max(deg.nodes * f, 1.0))), np.zeros_like(d)]
    seeded = [pi.copy() for pi in pis]
    rows, edges, local = np.zeros(layers + 1), np.zeros(layers), np.ones(layers + 1)
    rows[layers] = float((n_j * f * pis[0]).sum())
    for hop, k in enumerate(fanouts):
        layer = layers - 1 - hop
        c = d if k == -1 else np.minimum(d, k)
        draw = c / np.maximum(d, 1.0)  # chance that a given in-edge is drawn
        weights = [n_j * share * pi * c for share, pi in zip(sides, pis)]
        m_side = [float(w.sum()) for w in weights]
        m = sum(m_side)
        added = sum(float((n_j * share * (pi - s0) * draw).sum()) for share, pi, s0 in zip(sides, pis, seeded))
        tree = sum(float((n_j * share * (pi - s0)).sum()) for share, pi, s0 in zip(sides, pis, seeded))
        back = added + tree * sum(float((w * draw).sum()) for w in weights) / max(m, 1e-30)
        fresh = max(m - back, 0.0)
        x = (m_side[0] * local_keep + m_side[1] * remote_in) / max(m, 1e-30)  # a draw's source is own
        for i, (share, target) in enumerate(zip(sides, (x, 1.0 - x))):
            if share > 0 and target > 0:
                log_miss = np.log1p(-np.minimum(d / (E * share), 1.0 - 1e-15))
                pis[i] = 1.0 - (1.0 - pis[i]) * np.exp(fresh * target * log_miss)
        own, other = (float((n_j * share * pi).sum()) for share, pi in zip(sides, pis))
        rows[layer], edges[layer], local[layer] = own + other, m, own / max(own + other, 1e-12)
    return SampledSizes(rows, edges, local)


def chain_of_part(stats: PartitionStats, p: int) -> tuple[float, float]:
    """``(a_p, b_p)`` of part ``p`` from the partition's edge matrix (module docstring)."""
    e = np.asarray(stats.edges_per_shard, dtype=np.float64)
    inn = e.sum(axis=1)
    a = float(e[p, p] / inn[p]) if inn[p] > 0 else 1.0
    others = [q for q in range(stats.num_parts) if q != p]
    denom = float(inn[others].sum()) if others else 0.0
    b = float(e[others, p].sum() / denom) if denom > 0 else 0.0
    return a, b
