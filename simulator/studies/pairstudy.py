"""The METIS pair-size study: how per-pair halo sizes and the edge cut of METIS partitions grow with the parts.

``python -m sarlab.simulator.studies.pairstudy --out simulator/profiles/partitions/metis_pairs.json`` generates
power-law graphs (:func:`sarlab.data.graphs.synthetic_graph`, a degree-corrected block model), partitions each with
METIS (:func:`sarlab.data.partition.assign_parts`) into ``P = 2, 4, ..., 128`` parts and records, per ``P``:

* the edge cut ``phi`` (cut edges over all edges);
* ``c_pq``, the edges into part ``p`` from part ``q != p``, normalised by their mean over ordered pairs:
  the fraction of empty pairs, quantiles (:data:`QUANTILES`; ``max / mean`` is what a ring round, which
  ends with its slowest pair, pays) and how much of their log-variance is a part's own (row) effect;
* ``h_pq`` (distinct rows of ``q`` that ``p`` needs) against ``c_pq``: the repeat factor ``kappa`` of
  :math:`h = n_q (1 - e^{-c / (\\kappa n_q)})` (``kappa = 1``: every cut edge a new source row);
* per part: nodes, local edges, cut edges in and halo rows in, over their means (compute imbalance).

It also keeps every partition's matrices (edges per ordered pair, halo rows, part sizes) in an ``.npz`` beside
the JSON (``g<i>_p<P>_{nodes,edges,halo}``): a ring round pairs ``p`` with ``p - r``, and METIS numbers
neighbouring parts close together, so which pairs are large depends on the offset ``r`` as well as on the
distribution, and only the matrices keep that. :mod:`sarlab.simulator.workload.pairlaw` uses the matrices at the studied
part counts and a law fitted to the numbers elsewhere. Each run writes both files whole (data + provenance).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import numpy as np

from sarlab.common.machine import cpu_model, load_1min, today
from sarlab.data.graphs import synthetic_graph
from sarlab.data.partition import assign_parts

_log = logging.getLogger(__name__)

#: quantile levels recorded for the normalised pair sizes and per-part loads (:mod:`sarlab.simulator.workload.pairlaw`
#: draws
#: from these quantile functions)
QUANTILES = tuple(round(x, 4) for x in [*(i / 40 for i in range(41)), 0.99, 0.995, 0.999])
#: the graphs of the study (synthetic_graph arguments): papers100M-like (sparse, many classes) and
#: products-like (dense, 47 classes)
GRAPHS = (
    {"nodes": 400_000, "degree": 15.0, "classes": 172, "features": 1, "seed": 1},
    {"nodes": 200_000, "degree": 50.0, "classes": 47, "features": 1, "seed": 2},
)
PARTS = (2, 4, 8, 16, 32, 64, 128)


def pair_matrices(src: np.ndarray, dst: np.ndarray, parts: np.ndarray, num_parts: int) -> tuple[np.ndarray, ...]:
    """``(nodes per part, E[p][q] edges into p from q, H[p][q] distinct rows of q that p needs)``."""
    n = parts.shape[0]
    pd, ps = parts[dst], parts[src]
    edges = np.bincount(pd * num_parts + ps, minlength=num_parts * num_parts).reshape(num_parts, num_parts)
    cut = pd != ps
    key = np.unique(pd[cut] * n + src[cut])  # distinct (destination part, source row) pairs
    halo = np.bincount((key // n) * num_parts + parts[key % n], minlength=num_parts * num_parts)
    return np.bincount(parts, minlength=num_parts), edges, halo.reshape(num_parts, num_parts)


def repeat_factor(cut: np.ndarray, halo: np.ndarray, src_nodes: np.ndarray) -> float:
    """``kappa`` with :math:`\\sum h = \\sum n_q (1 - e^{-c/(\\kappa n_q)})` over the non-empty pairs
    (bisection in log kappa; the right side falls as kappa grows)."""
    c, h, nq = cut.astype(float), halo.astype(float), src_nodes.astype(float)
    want = h.sum()

    def predicted(kappa: float) -> float:
        return float((nq * -np.expm1(-c / (kappa * nq))).sum())

    lo, hi = 0.01, 1e4
    for _ in range(80):
        mid = float(np.sqrt(lo * hi))
        if predicted(mid) > want:
            lo = mid
        else:
            hi = mid
    return float(np.sqrt(lo * hi))


def pair_statistics(nodes: np.ndarray, edges: np.ndarray, halo: np.ndarray) -> dict:
    """The statistics of one partition that :mod:`sarlab.simulator.workload.pairlaw` fits (see the module docstring)."""
    P = nodes.shape[0]
    off = ~np.eye(P, dtype=bool)
    c, h = edges[off].astype(float), halo[off].astype(float)
    c_mean, h_mean = c.mean(), h.mean()
    nonzero = c > 0
    cn = c[nonzero] / c_mean
    src_nodes = np.broadcast_to(nodes[None, :], (P, P))[off][nonzero]
    # log-variance of the non-empty pair sizes split into a destination-part effect, a source-part effect
    # and the pair's own (two-way additive fit on the pairs that carry edges)
    logc = np.full((P, P), np.nan)
    logc[off] = np.where(c > 0, np.log(np.maximum(c, 1)), np.nan)
    grand = np.nanmean(logc)
    row = np.nan_to_num(np.nanmean(logc, axis=1) - grand)
    col = np.nan_to_num(np.nanmean(logc, axis=0) - grand)
    resid = logc - grand - row[:, None] - col[None, :]
    # a ring round r pairs every p with p - r: it ends with its slowest pair (mean over rounds of max / mean)
    ranks = np.arange(P)
    rounds = [halo[ranks, (ranks - r) % P] for r in range(1, P)]
    local = np.diag(edges).astype(float)
    cut_in = edges.sum(axis=1) - local
    halo_in = halo.sum(axis=1).astype(float)
    return {
        "parts": P,
        "edge_cut": float(1.0 - local.sum() / edges.sum()),
        "pair_mean_edges": float(c_mean),
        "pair_empty_fraction": float(1.0 - nonzero.mean()),
        "pair_max_over_mean": float(c.max() / c_mean),
        "pair_quantiles": [float(q) for q in np.quantile(c / c_mean, QUANTILES)],
        "pair_log_sd": float(np.log(cn).std()),
        "pair_log_sd_row": float(row.std()),
        "pair_log_sd_col": float(col.std()),
        "pair_log_sd_resid": float(np.nanstd(resid)),
        "halo_mean_rows": float(h_mean),
        "halo_max_over_mean": float(h.max() / max(h_mean, 1e-300)),
        "halo_quantiles": [float(q) for q in np.quantile(h / h_mean, QUANTILES)],
        "local_quantiles": [float(q) for q in np.quantile(local / local.mean(), QUANTILES)],
        "ring_round_halo_max_over_mean": float(np.mean([x.max() for x in rounds]) / max(h_mean, 1e-300)),
        "repeat_factor": repeat_factor(c[nonzero], h[nonzero], src_nodes),
        "nodes_max_over_mean": float(nodes.max() / nodes.mean()),
        "local_edges_max_over_mean": float(local.max() / local.mean()),
        "local_edges_cv": float(local.std() / local.mean()),
        "cut_in_max_over_mean": float(cut_in.max() / cut_in.mean()),
        "cut_in_cv": float(cut_in.std() / cut_in.mean()),
        "halo_in_max_over_mean": float(halo_in.max() / halo_in.mean()),
        "halo_in_cv": float(halo_in.std() / halo_in.mean()),
    }


def study(graphs=GRAPHS, parts=PARTS, progress=_log.info) -> tuple[dict, dict[str, np.ndarray]]:
    """Partition every graph into every part count; returns the data file's content and the matrices."""
    out = {"graphs": [], "quantile_levels": list(QUANTILES)}
    matrices: dict[str, np.ndarray] = {}
    for gi, spec in enumerate(graphs):
        t0 = time.perf_counter()
        g = synthetic_graph(**spec)
        entry = {"spec": spec, "num_nodes": g.num_nodes, "num_edges": g.num_edges, "partitions": []}
        progress(f"graph {spec}: {g.num_edges:,} edges ({time.perf_counter() - t0:.0f} s)")
        for P in parts:
            t0 = time.perf_counter()
            assignment = assign_parts(g, P, "metis", seed=0)
            nodes, edges, halo = pair_matrices(g.src, g.dst, assignment, P)
            for name, m in (("nodes", nodes), ("edges", edges), ("halo", halo)):
                matrices[f"g{gi}_p{P}_{name}"] = m.astype(np.int64)
            stats = pair_statistics(nodes, edges, halo)
            stats["metis_s"] = round(time.perf_counter() - t0, 1)
            entry["partitions"].append(stats)
            progress(f"  P={P}: cut {stats['edge_cut']:.3f}, empty pairs {stats['pair_empty_fraction']:.2f}, "
                     f"max/mean pair {stats['pair_max_over_mean']:.1f}, kappa {stats['repeat_factor']:.2f} "
                     f"({stats['metis_s']} s)")
        out["graphs"].append(entry)
    return out, matrices


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True,
                   help="JSON data file to write (e.g. simulator/profiles/partitions/metis_pairs.json)")
    p.add_argument("--parts", default=",".join(map(str, PARTS)), help="comma list of part counts")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the graphs' node counts (tests: 0.01)")
    args = p.parse_args(argv)
    parts = tuple(int(x) for x in args.parts.split(","))
    graphs = tuple({**g, "nodes": max(int(g["nodes"] * args.scale), 1000)} for g in GRAPHS)
    load0, t0 = load_1min(), time.perf_counter()
    data, matrices = study(graphs, parts)
    data["provenance"] = {
        "command": "python -m sarlab.simulator.studies.pairstudy " + " ".join(argv or []),
        "date": today(), "cpu": cpu_model(), "seconds": round(time.perf_counter() - t0),
        "load_1min_start_end": [load0, load_1min()],
        "generator": "sarlab.data.graphs.synthetic_graph (degree-corrected block model, homophily 0.7, power 2.5)",
        "partitioner": "sarlab.data.partition.assign_parts(method='metis', seed=0) (pymetis, balanced nodes)",
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(data, indent=1) + "\n")
    np.savez_compressed(Path(args.out).with_suffix(".npz"), **matrices)
    print(f"wrote {args.out} and {Path(args.out).with_suffix('.npz')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
