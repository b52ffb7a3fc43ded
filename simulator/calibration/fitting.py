r"""Fitting calibration timings into profile numbers, and the check that a fit is plausible.

Op families are fitted by non-negative least squares in relative error to

.. math::
    t = o + \frac{w}{r} + \frac{v}{r_{row}} + \frac{e}{r_e}

(``w`` the family's work, ``v`` its dense-output row*feature work, ``e`` its edge visits; :func:`fit_op`); the
efficiency of each extra thread from one-thread and all-core times of one call, :math:`\eta = (t_1 / t_C - 1) / (C - 1)`
(:func:`thread_eta`), and of each extra co-located process from the rates alone and together
(:func:`share_eta`); the last-level cache and the out-of-cache rate from a sweep of growing matrices
(:func:`fit_cache`); a link's latency, per-message gap and bandwidth from ping-pong times (:func:`fit_link`);
the compute scale as a power law of the worker's memory (:func:`fit_scale_curve`), through the median of each
graph size's runs (:func:`median_scale_points`); the compute scale under another memory method relative to the
curve's from paired runs (:func:`fit_memory_ratio`); GEMM's factor relative to that curve and the other families'
shared one from engine runs of models that weigh them differently (:func:`fit_family_scale`).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np
from scipy.optimize import nnls

from sarlab.simulator.hardware.profile import OP_UNITS, Link


def fit_nonnegative(features: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    """Non-negative least squares of ``seconds ~ features @ coef``, in relative error.

    Rows are weighted by ``1/seconds`` so small and large shapes count alike.
    """
    w = 1.0 / np.maximum(seconds, 1e-9)
    coef, _ = nnls(features * w[:, None], seconds * w)
    return coef


def rate_from(coef: float, fallback: float) -> float:
    """Units per second from a fitted seconds-per-unit coefficient (``fallback`` when it is 0)."""
    return 1.0 / coef if coef > 0 else fallback


#: work units per second of a family whose work the fit found to cost nothing measurable beside its per-edge and
#: per-row terms (a billion units then take a microsecond)
FREE_RATE = 1e15


class OpFit(NamedTuple):
    """A sparse family's fitted costs (:func:`fit_op`): fields of :class:`~sarlab.simulator.hardware.opcost.OpCost` by
    the same names, so ``OpCost(**fit._asdict(), parallel_eff=...)`` builds the family's cost."""

    rate: float
    overhead_s: float
    row_rate: float | None
    bwd_ratio: float
    edge_rate: float | None = None
    edge_bwd_ratio: float | None = None


def fit_op(rows: list[list[float]], fwd: list[float], bwd: list[float], fallback_rate: float) -> OpFit:
    r"""A sparse family's costs from its shapes' design rows ``[1, w, v]`` or ``[1, w, v, e]`` (``e``: edge visits),
    forward and backward times.

    The forward is :math:`t = o + w/r + v/r_{row} + e/r_e` (:func:`fit_nonnegative`). Without an edge term (no such
    column, or its coefficient 0) the backward ratio is the median of backward over forward; with one, the backward is
    fitted as :math:`\rho\,(o + w/r + v/r_{row}) + \rho_e\,e/r_e` (non-negative, relative error): GAT's backward
    grows with the channels faster than its forward, so one ratio over-prices narrow heads' backward."""
    design, t_fwd = np.array(rows, dtype=float), np.array(fwd, dtype=float)
    coef = fit_nonnegative(design, t_fwd)
    row_rate = 1.0 / coef[2] if coef[2] > 0 else None
    ratio = statistics.median(b / f for b, f in zip(bwd, fwd, strict=True)) if bwd else 2.0
    if design.shape[1] < 4 or coef[3] <= 0:
        return OpFit(rate_from(coef[1], fallback_rate), float(coef[0]), row_rate, float(ratio))
    # with edge visits the work's own cost may fit to nil (GAT's in-cache channels: its time is per edge-head and
    # per row): free, not the fallback rate of a family that was not measured
    rate, overhead = (min(1.0 / coef[1], FREE_RATE) if coef[1] > 0 else FREE_RATE), float(coef[0])
    edge_part = design[:, 3] * coef[3]
    main_part = design[:, :3] @ coef[:3]
    if not bwd:
        return OpFit(rate, overhead, row_rate, float(ratio), float(1.0 / coef[3]), None)
    rho, rho_e = fit_nonnegative(np.stack([main_part, edge_part], axis=1), np.array(bwd, dtype=float))
    if rho <= 0 or rho_e <= 0:  # the backward does not tell the two apart: one ratio, as without the term
        return OpFit(rate, overhead, row_rate, float(ratio), float(1.0 / coef[3]), None)
    return OpFit(rate, overhead, row_rate, float(rho), float(1.0 / coef[3]), float(rho_e))


def thread_eta(one: float, all_cores: float, cores: int) -> float:
    """Efficiency of each extra thread from one-thread and all-core times of the same call (unclipped)."""
    return (one / max(all_cores, 1e-12) - 1.0) / (cores - 1)


def share_eta(solo: dict[str, float], shared: list[dict[str, float]]) -> dict[str, float]:
    r"""Per family, the efficiency of each extra co-located process from one solo and one co-located window:
    with rates ``r_1`` alone and ``r_C`` (mean of the ``C`` copies), :math:`\eta = (C r_C / r_1 - 1)/(C - 1)`
    (unclipped)."""
    cores = len(shared)
    if cores < 2:
        raise ValueError("share_eta needs at least two co-located processes")
    return {
        name: (cores * statistics.mean(out[name] for out in shared) / rate - 1.0) / (cores - 1)
        for name, rate in solo.items()
    }


def pair_share_etas(rates: dict[str, dict[str, list]], processes: int) -> dict[str, list[float]]:
    """Per family, :func:`share_eta` of every pair of adjacent windows in which the lead process ran both alone
    (``rates[family]["solo"][j]``) and beside ``processes - 1`` others (``["shared"][j]``), the others taken to
    run at the lead's co-located rate; pairs with a missing window are left out (unclipped)."""
    out: dict[str, list[float]] = {}
    for name, windows in rates.items():
        out[name] = [share_eta({name: solo}, [{name: shared}] * processes)[name]
                     for solo, shared in zip(windows["solo"], windows["shared"], strict=True)
                     if solo and shared]
    return out


def fit_cache(work: list[float], edge_s: list[float], gathered: list[float], rate: float) -> tuple[float, float]:
    """Last-level cache ``L`` and out-of-cache rate ``r_mem`` from the edge time of shapes of growing size.

    Each shape's edge work ``w`` (its time less the overhead and row terms) is modelled as
    :math:`w (h / r + (1 - h) / r_{mem})` with :math:`h = \\min(1, L / G)` for a gathered matrix of ``G``
    bytes; ``L`` is searched on a geometric grid (1 MB - 4 GB), ``1/r_mem`` fitted by least squares in
    relative error for each. Returns ``(L, r_mem)``; ``(0, rate)`` when nothing runs slower than ``r``.
    """
    w, t, g = np.asarray(work, float), np.asarray(edge_s, float), np.asarray(gathered, float)
    best = (np.inf, 0.0, rate)
    for llc in np.geomspace(1e6, 4e9, 97):
        miss = 1.0 - np.minimum(1.0, llc / g)
        if not np.any(miss > 0):
            continue
        # t / w - 1/r = miss * (1/r_mem - 1/r), relative weights 1 / t
        a, y, wt = miss * w, t - w / rate, 1.0 / t
        excess = float(np.sum(wt**2 * a * y) / max(np.sum(wt**2 * a * a), 1e-30))
        inv_mem = max(1.0 / rate + excess, 1.0 / rate)
        pred = w * ((1.0 - miss) / rate + miss * inv_mem)
        err = float(np.sum(((pred - t) / t) ** 2))
        if err < best[0]:
            best = (err, float(llc), 1.0 / inv_mem)
    _, llc, mem_rate = best
    return (llc, mem_rate) if mem_rate < rate * 0.99 else (0.0, rate)


def fit_gather_rates(edge_s: Sequence[float], work: Sequence[float], gathered: Sequence[float], llc: float
                     ) -> tuple[float, float] | None:
    """In-cache rate ``r`` and out-of-cache rate ``r_mem`` of a family whose edge work ``w`` gathers rows of a
    ``G``-byte matrix, from shapes whose ``G`` straddles the cache ``L`` (a profile's ``llc_bytes``, fitted on SpMM):
    :math:`t = w (h / r + (1 - h) / r_{mem})`, :math:`h = \\min(1, L / G)`, non-negative least squares in
    relative error. ``edge_s``: each shape's edge time (its time less the overhead, row and edge-visit terms; shapes
    with none left are left out). ``r`` is :data:`FREE_RATE` where the in-cache work costs nothing measurable beside
    those terms. None where the shapes do not tell the two apart (fewer than two shapes, none beyond the cache, none
    inside it, or no out-of-cache cost)."""
    t, w, g = (np.asarray(v, dtype=float) for v in (edge_s, work, gathered))
    keep = t > 0  # a shape whose other terms explain all its time: nothing left to fit (its rate then is free)
    t, w, g = t[keep], w[keep], g[keep]
    if llc <= 0 or len(t) < 2:
        return None
    hit = np.minimum(1.0, llc / g)
    if not (np.any(hit < 1.0) and np.any(hit > 0.5)):
        return None
    inv_r, inv_mem = fit_nonnegative(np.stack([w * hit, w * (1.0 - hit)], axis=1), t)
    if inv_mem <= 0:
        return None
    return float(min(1.0 / inv_r, FREE_RATE)) if inv_r > 0 else FREE_RATE, float(1.0 / inv_mem)


def fit_link(sizes: Sequence[int], result: dict[str, Any]) -> Link:
    r"""The link of :mod:`sarlab.real.calibration.netbench`'s measurements: :math:`t = \alpha + b / B` fitted to
    the one-way ping-pong times, the gap ``g`` from the stream of small messages (``L = alpha - g``), and the
    bandwidth capped by the bulk exchange's when there is one.

    The engine's halo messages are tens to hundreds of MB, exchanged both ways at once into fresh buffers:
    their sustained bandwidth, not the ping-pong's of reused <= 16 MB buffers, prices them. ``result`` gains
    ``pingpong_bandwidth_Bps`` when the bulk exchange decided the bandwidth.
    """
    one_way = np.array([result["one_way_s"][str(s)] for s in sizes])
    coef = fit_nonnegative(np.array([[1.0, float(s)] for s in sizes]), one_way)
    alpha = float(coef[0]) if coef[0] > 0 else float(one_way.min())
    bandwidth = 1.0 / coef[1] if coef[1] > 0 else float(sizes[-1] / one_way[-1])
    gap = float(min(result["stream_s"], alpha))
    if result.get("bulk_exchange_s"):
        bulk_bw = result["bulk_bytes"] / max(result["bulk_exchange_s"] - alpha, 1e-9)
        result["pingpong_bandwidth_Bps"] = bandwidth
        bandwidth = min(bandwidth, bulk_bw)
    return Link(latency_s=alpha - gap, bandwidth_Bps=bandwidth, gap_s=gap)


def fit_scale_curve(keys: list[float], ratios: list[float]) -> tuple[tuple[float, float], ...]:
    """The compute scale as a power law of the key: the least-squares line of log(ratio) on log(key) over
    all runs, as its two end points (smallest and largest key; :meth:`Profile.scale_at` interpolates
    log-linearly between them and holds the ends beyond). A line rather than a node per graph size, so
    that one noisy run moves the curve a little instead of making a kink. One distinct key: the geometric
    mean, as one point."""
    x, y = np.log(np.asarray(keys, dtype=float)), np.log(np.asarray(ratios, dtype=float))
    if len(x) == 0:
        raise ValueError("fit_scale_curve needs at least one run")
    if np.ptp(x) <= 0:
        return ((float(np.exp(x[0])), float(np.exp(y.mean()))),)
    slope, icept = np.polyfit(x, y, 1)
    ends = (float(x.min()), float(x.max()))
    return tuple((float(np.exp(e)), float(np.exp(icept + slope * e))) for e in ends)


def median_scale_points(
    sizes: Sequence[int], keys: Sequence[float], ratios: Sequence[float]
) -> tuple[list[float], list[float], list[float]]:
    """One point per graph size from several engine runs of it (models and passes): the geometric mean of its
    runs' keys, the median of their ratios, and the spread of the ratios (largest over smallest). The median
    of four runs (two models, two passes) ignores one run that a busy minute slowed; the least-squares line of
    :func:`fit_scale_curve` through all runs did not (the 2026-11-26 calibrations: 1.53 and 0.93 for the same
    12,500-node GCN run ten minutes apart). Returns (keys, ratios, spreads) by increasing size."""
    if not (len(sizes) == len(keys) == len(ratios)) or not sizes:
        raise ValueError("median_scale_points needs one size, key and ratio per run")
    out_keys, out_ratios, spreads = [], [], []
    for size in sorted(set(sizes)):
        k = np.array([key for s, key in zip(sizes, keys, strict=True) if s == size], dtype=float)
        r = np.array([ratio for s, ratio in zip(sizes, ratios, strict=True) if s == size], dtype=float)
        out_keys.append(float(np.exp(np.log(k).mean())))
        out_ratios.append(float(np.median(r)))
        spreads.append(float(r.max() / r.min()))
    return out_keys, out_ratios, spreads


def fit_memory_ratio(other_s: Sequence[float], own_s: Sequence[float]) -> tuple[float, float]:
    """The compute scale under another memory method relative to the curve's
    (:attr:`~sarlab.simulator.hardware.profile.Profile.memory_scale`): the median of the paired epoch-time ratios
    ``other / own`` (each pair: one configuration run under both methods in the same pass, so a slow minute
    hits one pair, not the median), and the pairs' spread (largest ratio over smallest).

    Args:
        other_s: measured epoch times under the other method (e.g. ``rss``), one per pair.
        own_s: the same configurations' epoch times under the curve's method (e.g. ``live``).
    """
    other, own = np.asarray(other_s, dtype=float), np.asarray(own_s, dtype=float)
    if len(other) != len(own) or not len(other):
        raise ValueError("fit_memory_ratio needs one epoch time under each method per pair, and a pair at least")
    if not (np.all(np.isfinite(other)) and np.all(np.isfinite(own)) and other.min() > 0 and own.min() > 0):
        raise ValueError(f"fit_memory_ratio needs finite epoch times > 0, got {list(other)} and {list(own)}")
    ratios = other / own
    return float(np.median(ratios)), float(ratios.max() / ratios.min())


#: a family factor is held within these bounds (the log and the profile's notes say when a fit reached one)
FAMILY_BOUNDS = (0.25, 4.0)
#: a group of families is fitted only where it takes at least this share of some run's predicted time (else it stays 1)
FAMILY_MIN_SHARE = 0.1
#: weight of the pull of each factor towards 1 (the curve alone), against the runs' squared relative errors
FAMILY_RIDGE = 0.002
#: the op families that get a factor of their own; every other family shares one (:func:`fit_family_scale`)
FAMILY_APART = ("gemm",)


#: the families that price a shard's aggregation (one per run: the model and its kernels choose it)
AGGREGATION_FAMILIES = ("spmm", "max_aggr", "gat_fused", "gat_unfused", "gat_autograd")


def aggregation_factors(measured_s: Sequence[float | None], family_s: Sequence[dict[str, float]]) -> dict[str, float]:
    """The aggregation families' factors relative to the compute-scale curve, measured directly: for each run whose
    aggregation was timed (``measured_s``, None where not) and whose split (``family_s``, at the curve's scale) prices
    exactly one of :data:`AGGREGATION_FAMILIES`, measured over priced; per family the median over its runs, held within
    :data:`FAMILY_BOUNDS`. Families no run measured are left out."""
    if len(measured_s) != len(family_s):
        raise ValueError("aggregation_factors needs one measurement (or None) and one family split per run")
    ratios: dict[str, list[float]] = {}
    for agg, split in zip(measured_s, family_s, strict=True):
        used = [f for f in AGGREGATION_FAMILIES if split.get(f, 0.0) > 0.0]
        if agg is None or not agg > 0.0 or len(used) != 1:
            continue
        ratios.setdefault(used[0], []).append(agg / split[used[0]])
    low, high = FAMILY_BOUNDS
    return {f: float(np.clip(statistics.median(v), low, high)) for f, v in ratios.items()}


def fit_family_scale(measured_s: Sequence[float], family_s: Sequence[dict[str, float]],
                     apart: Sequence[str] = FAMILY_APART, known: dict[str, float] | None = None) -> dict[str, float]:
    r"""The op families' factors relative to the compute-scale curve
    (:attr:`~sarlab.simulator.hardware.profile.Profile.family_scale`) from engine runs of models whose predicted time
    splits differently over the families (GCN, SAGE and GAT: SAGE has two GEMMs a layer, GCN one, GAT's time is
    mostly its attention): one factor for each family of ``apart`` (:data:`FAMILY_APART`: GEMM) and one shared by
    every other family, :math:`k_g` for group ``g``:

    .. math::
        \min_k \sum_i \Big(\frac{\sum_g k_g\, p_{ig}}{m_i} - 1\Big)^2 + \lambda \sum_g (k_g - 1)^2

    with :math:`m_i` run ``i``'s measured epoch and :math:`p_{ig}` the seconds the simulator gives group ``g`` of it
    at the curve's scale (``family_s``, per family; :func:`sarlab.simulator.system.replay.family_seconds`): a linear
    least squares in relative error with a weak pull (:data:`FAMILY_RIDGE`) towards 1. A group under
    :data:`FAMILY_MIN_SHARE` of every run keeps 1 and is left out; factors are held within :data:`FAMILY_BOUNDS`.

    Why two groups: with a factor per family (GEMM, SpMM, elementwise, fused attention) the 8 runs of one calibration
    moved the attention's factor from 0.97 to 1.55 between two sittings (single runs differ 10-20 % on the 2-core
    VM); GEMM against the rest is what the runs tell apart, since its share ranges from 8 % (GAT) to 59 % (SAGE).
    ``known``: families whose factors were measured another way (:func:`aggregation_factors`): their seconds times
    those factors are taken as they are, and the groups are fitted on the rest of each run (the shared group then
    holds the families neither ``apart`` nor known). Returns ``{family: factor}`` for the families of ``apart``, of
    ``known`` and every other family of :data:`~sarlab.simulator.hardware.profile.OP_UNITS`.
    """
    known = dict(known or {})
    m = np.asarray(measured_s, dtype=float)
    if len(m) != len(family_s) or not len(m):
        raise ValueError("fit_family_scale needs one measured epoch and one family split per run, and a run at least")
    if not (np.all(np.isfinite(m)) and m.min() > 0):
        raise ValueError(f"fit_family_scale needs finite measured epochs > 0, got {list(m)}")
    apart = [f for f in apart if f not in known]
    groups = [*apart, None]  # None: every other family
    p = np.array([[sum(v for f, v in split.items() if (f == g if g else f not in apart and f not in known))
                   for g in groups] for split in family_s], dtype=float)  # fmt: skip
    given = np.array([sum(k * split.get(f, 0.0) for f, k in known.items()) for split in family_s], dtype=float)
    total = p.sum(axis=1, keepdims=True) + given[:, None]
    shares = p / np.maximum(total, 1e-30)
    fitted = [j for j in range(len(groups)) if shares[:, j].max() >= FAMILY_MIN_SHARE]
    if not fitted:
        return dict(known)
    fixed = [j for j in range(len(groups)) if j not in fitted]
    a = p[:, fitted] / m[:, None]
    b = 1.0 - (p[:, fixed].sum(axis=1) + given) / m
    ridge = np.sqrt(FAMILY_RIDGE)
    k, *_ = np.linalg.lstsq(np.vstack([a, ridge * np.eye(len(fitted))]),
                            np.concatenate([b, ridge * np.ones(len(fitted))]), rcond=None)
    low, high = FAMILY_BOUNDS
    found = {groups[j]: float(np.clip(v, low, high)) for j, v in zip(fitted, k, strict=True)}
    out = {g: v for g, v in found.items() if g is not None}
    if None in found:
        out.update({f: found[None] for f in OP_UNITS if f not in apart and f not in known})
    return {**out, **known}


def fit_message_costs(runs: Sequence[dict[str, Any]], small: int | None = None) -> dict[str, float]:
    r"""Per-call and per-op software costs of messages (gloo's or another backend's) from
    :mod:`sarlab.real.calibration.commbench` runs.

    Over the ``ring`` (2 ops) and ``alltoall`` (``2 (W-1)`` ops) patterns of every world size ``W``, at the
    smallest message size (``small``), the main thread's CPU time of one posting call and of its waits are
    lines in the op count ``k``:

    .. math::
        t_{post}(k) = c + k\,o, \qquad t_{wait}(k) = k\,w

    (non-negative least squares on the medians); ``c`` is ``p2p_call_s`` (for one exchange call), ``o``
    ``p2p_op_s`` and ``w`` ``p2p_wait_s``. The background CPU per op (the backend's threads: process CPU less the
    main thread's, per op) is ``p2p_msg_cpu_s``; the incast ratio ``T_k / (k T_1)`` per ``k`` is recorded
    as measured (1 = the receiver serialises its ``k`` incoming messages at one message's rate).
    """
    rows = []
    for run in runs:
        size = small if small is not None else min(run["sizes"])
        for pattern in ("ring", "alltoall"):
            m = run["medians"].get(f"{pattern}:{size}")
            if m:
                rows.append((float(m["ops"]), m["post_s"], m["wait_s"], m["cpu_s"] - m["post_s"] - m["wait_s"]))
    if not rows:
        raise ValueError("fit_message_costs needs commbench runs with ring or alltoall medians")
    k = np.array([r[0] for r in rows])
    post, wait, bg = (np.array([r[i] for r in rows]) for i in (1, 2, 3))
    c, o = fit_nonnegative(np.stack([np.ones_like(k), k], axis=1), post)
    (w,) = fit_nonnegative(k[:, None], wait)
    (b,) = fit_nonnegative(k[:, None], np.maximum(bg, 1e-9))
    incast = {}
    for run in runs:
        walls = {int(key): v for key, v in run.get("incast_wall_s", {}).items()}
        if 1 in walls:
            for key, v in walls.items():
                incast.setdefault(key, []).append(v / (key * walls[1]))
    return {"p2p_call_s": float(c), "p2p_op_s": float(o), "p2p_wait_s": float(w), "p2p_msg_cpu_s": float(b),
            **{f"incast_ratio_{key}": float(statistics.median(v)) for key, v in sorted(incast.items())}}
