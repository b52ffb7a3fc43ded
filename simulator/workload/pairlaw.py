"""The pair-size law: partitions of graphs too large to partition here, drawn from what METIS did to smaller ones.

Its data is ``simulator/profiles/partitions/metis_pairs.json`` and ``.npz``, written by
:mod:`sarlab.simulator.studies.pairstudy` (METIS partitions of power-law graphs at ``P = 2 .. 128`` parts). For a graph
of ``n`` nodes and ``E`` edges into ``P`` parts the law takes the study graph of the nearest mean degree (its *family*).

At a studied ``P`` it uses that partition itself, scaled to the graph: part ``p`` gets ``n`` times its share of
the study's nodes, ``(1 - phi) E`` times its share of the local edges, and pair ``(p, q)`` ``phi E`` times its
share of the cut edges, halo rows as below. This keeps which pairs are large *in which ring round*: METIS numbers
neighbouring parts close together, so the largest pairs lie at small offsets ``r`` and a few rounds carry them.

At other ``P`` it draws, interpolating linearly in ``log P`` between the studied part counts (and holding the end
values beyond them):

* the edge cut :math:`\\phi(P)` (unless one is given);
* the quantile function :math:`Q_c` of the pair sizes ``c_pq`` over their mean, the share ``r`` of their
  log-variance that is a part's own effect (a part with a long boundary has large pairs with everyone), the
  quantile function :math:`Q_e` of the parts' local edges over their mean, and the repeat factor ``kappa``.

Draw (seeded, so a prediction repeats): standard normal part effects ``a_p`` and symmetric pair noise
``e_pq = e_qp``, :math:`z_{pq} = \\sqrt{r}\\,(a_p + a_q)/\\sqrt{2} + \\sqrt{1-r}\\,e_{pq}`, and

.. math::
    c_{pq} = \\frac{\\phi E}{P(P-1)} \\frac{Q_c(\\Phi(z_{pq}))}{\\overline{Q_c(\\Phi(z))}}, \\qquad
    e_{pp} = \\frac{(1-\\phi) E}{P} \\frac{Q_e(u_p)}{\\overline{Q_e(u)}}, \\qquad
    h_{pq} = n_q \\left(1 - e^{-c_{pq} / (\\kappa\\, n_q)}\\right)

(``u_p`` uniform; parts of equal size ``n/P``, as METIS balances nodes to ~3 %). A draw spreads the large pairs
over all rounds, which overstates the slowest pair of a round where the study clusters them (dense family at
``P = 128``: 8.3 times the mean pair's halo per round drawn, 2.6 in the study). The halo formula is
:func:`sarlab.simulator.workload.workload.expected_distinct_sources`'s with the sources repeated ``kappa`` times as
often as uniform edges would repeat them, ``kappa`` fitted to the studied halos. What it cannot know: how a real graph's
communities differ from the generator's (the study graphs are degree-corrected block models, communities =
classes, 70 % of edges inside them), and shapes beyond ``P = 128``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
from scipy.special import ndtr

#: the shipped study (an input, like the machine profiles)
DATA = Path(__file__).resolve().parent.parent / "profiles" / "partitions" / "metis_pairs.json"


@dataclass(frozen=True)
class Family:
    """One study graph's METIS partitions: per studied part count, the numbers the law interpolates."""

    name: str
    degree: float
    parts: np.ndarray  # studied P, increasing
    edge_cut: np.ndarray  # phi per P
    row_share: np.ndarray  # r per P
    repeat: np.ndarray  # kappa per P
    levels: np.ndarray  # quantile levels
    pair_q: np.ndarray  # [len(parts), len(levels)] pair sizes over their mean
    local_q: np.ndarray  # [len(parts), len(levels)] local edges over their mean
    matrices: dict  # studied P -> (nodes per part, edges [p][q], halo [p][q]) of the study's partition

    def at(self, parts: int) -> tuple[float, float, float, np.ndarray, np.ndarray]:
        """``(phi, r, kappa, Q_c, Q_e)`` at ``parts``, interpolated linearly in log P (ends held)."""
        x = np.log(self.parts)
        t = float(np.log(max(parts, 2)))

        def interp(values: np.ndarray) -> np.ndarray:
            if values.ndim == 1:
                return np.asarray(np.interp(t, x, values))
            return np.array([np.interp(t, x, values[:, j]) for j in range(values.shape[1])])

        return (float(interp(self.edge_cut)), float(interp(self.row_share)), float(interp(self.repeat)),
                interp(self.pair_q), interp(self.local_q))


@lru_cache(maxsize=4)
def load_families(path: str = str(DATA)) -> tuple[Family, ...]:
    """The families of a study file (see :mod:`sarlab.simulator.studies.pairstudy`)."""
    data = json.loads(Path(path).read_text())
    levels = np.asarray(data["quantile_levels"], dtype=np.float64)
    npz = Path(path).with_suffix(".npz")
    arrays = dict(np.load(npz)) if npz.exists() else {}
    out = []
    for gi, g in enumerate(data["graphs"]):
        rows = sorted(g["partitions"], key=lambda s: s["parts"])
        sd = np.array([s["pair_log_sd"] for s in rows])
        row = np.array([s["pair_log_sd_row"] for s in rows])
        share = np.where(sd > 0, np.clip(2.0 * row**2 / np.maximum(sd**2, 1e-300), 0.0, 1.0), 0.0)
        out.append(Family(
            name=f"nodes={g['num_nodes']},degree={g['num_edges'] / g['num_nodes']:.1f},classes={g['spec']['classes']}",
            degree=g["num_edges"] / g["num_nodes"],
            parts=np.array([s["parts"] for s in rows], dtype=np.float64),
            edge_cut=np.array([s["edge_cut"] for s in rows]),
            row_share=share,
            repeat=np.array([s["repeat_factor"] for s in rows]),
            levels=levels,
            pair_q=np.array([s["pair_quantiles"] for s in rows]),
            local_q=np.array([s["local_quantiles"] for s in rows]),
            matrices={s["parts"]: tuple(arrays[f"g{gi}_p{s['parts']}_{k}"] for k in ("nodes", "edges", "halo"))
                      for s in rows if f"g{gi}_p{s['parts']}_edges" in arrays},
        ))  # fmt: skip
    return tuple(out)


def family_for(num_nodes: int, num_edges: int, path: str = str(DATA)) -> Family:
    """The study family whose mean degree ``E / n`` is nearest (in log) to the graph's."""
    degree = max(num_edges / max(num_nodes, 1), 1e-9)
    return min(load_families(path), key=lambda f: abs(np.log(f.degree / degree)))


def draw_partition(num_nodes: int, num_edges: int, parts: int, edge_cut: float | None = None, seed: int = 0,
                   path: str = str(DATA)) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """``(nodes per part, edges [p][q], halo rows [p][q], description)`` drawn from the law (module docstring).

    Args:
        num_nodes, num_edges: the graph's ``n`` and directed ``E``.
        parts: ``P``.
        edge_cut: ``phi``; ``None`` = the family's METIS cut at ``P``.
        seed: seed of the draw.
        path: the study file.
    """
    fam = family_for(num_nodes, num_edges, path)
    nodes = np.full(parts, num_nodes // parts, dtype=np.int64)
    nodes[: num_nodes % parts] += 1
    if parts == 1:
        return nodes, np.array([[num_edges]], dtype=np.int64), np.zeros((1, 1), dtype=np.int64), fam.name
    phi_law, share, kappa, pair_q, local_q = fam.at(parts)
    phi = phi_law if edge_cut is None else float(edge_cut)
    if parts in fam.matrices:
        return _scaled_study(fam, parts, num_nodes, num_edges, phi, kappa, edge_cut is not None)
    rng = np.random.default_rng(seed)
    own = rng.standard_normal(parts)
    noise = np.triu(rng.standard_normal((parts, parts)), 1)
    noise = noise + noise.T  # symmetric: c_pq = c_qp, as on an undirected graph
    z = np.sqrt(share) * (own[:, None] + own[None, :]) / np.sqrt(2.0) + np.sqrt(1.0 - share) * noise
    off = ~np.eye(parts, dtype=bool)
    x = np.interp(ndtr(z), fam.levels, pair_q)
    x[~off] = 0.0
    x *= (parts * (parts - 1)) / max(x.sum(), 1e-300)
    cut = phi * num_edges / (parts * (parts - 1)) * x
    y = np.interp(rng.random(parts), fam.levels, local_q)
    local = (1.0 - phi) * num_edges / parts * y / max(y.mean(), 1e-300)
    edges = cut.copy()
    np.fill_diagonal(edges, local)
    halo_rows = _halo(cut, nodes, kappa)
    given = "" if edge_cut is None else " given"
    what = f"metis-law(drawn from {fam.name}, P={parts}, cut={phi:.3g}{given}, kappa={kappa:.2f}, seed={seed})"
    return nodes, np.rint(edges).astype(np.int64), halo_rows, what


def _halo(cut: np.ndarray, nodes: np.ndarray, kappa: float) -> np.ndarray:
    """Halo rows of pairs with ``cut`` edges from sources of ``nodes`` rows (the module docstring's formula)."""
    n_q = nodes[None, :].astype(np.float64)
    halo = n_q * -np.expm1(-cut / (kappa * np.maximum(n_q, 1.0)))
    np.fill_diagonal(halo, 0.0)
    return np.minimum(np.rint(halo).astype(np.int64), nodes[None, :])


def _scaled_study(fam: Family, parts: int, num_nodes: int, num_edges: int, phi: float, kappa: float,
                  given: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """The study's own partition at ``parts``, scaled to ``num_nodes`` and ``num_edges`` with cut ``phi``."""
    s_nodes, s_edges, _ = fam.matrices[parts]
    share = s_nodes / s_nodes.sum()
    nodes = np.floor(share * num_nodes).astype(np.int64)
    nodes[np.argsort(-(share * num_nodes - nodes))[: num_nodes - nodes.sum()]] += 1  # largest remainders
    local = np.diag(s_edges).astype(np.float64)
    cut = s_edges.astype(np.float64)
    np.fill_diagonal(cut, 0.0)
    edges = cut * (phi * num_edges / max(cut.sum(), 1.0))
    np.fill_diagonal(edges, local * ((1.0 - phi) * num_edges / max(local.sum(), 1.0)))
    halo = _halo(np.where(np.eye(parts, dtype=bool), 0.0, edges), nodes, kappa)
    cut_text = f"{phi:.3g}{' given' if given else ''}"
    what = f"metis-law(study partition of {fam.name}, P={parts}, cut={cut_text}, kappa={kappa:.2f})"
    return nodes, np.rint(edges).astype(np.int64), halo, what
