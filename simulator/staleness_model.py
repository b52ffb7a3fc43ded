"""Bounded-staleness halos (``--staleness S``, ``sarlab/stale.py``), priced from the exact ``oneshot`` epoch.

With ``S >= 1`` a worker aggregates ``[own rows; cached halo rows]`` in one shard, as ``oneshot`` does, but the
halo rows come from a fetch posted ``S`` epochs earlier, and no gradient goes back for them. Every layer's
exchange is posted at the start of the layer and waited for ``S`` epochs later, so in steady state the link has
one epoch's compute to move one epoch's halo bytes, and only what does not fit shows:

.. math::
    t_{epoch} = \\max_p \\max\\big(c_p,\\ x_p\\big) + t_{allreduce}, \\qquad
    x_p = \\sum_l \\Big(L + (N-1)\\,g + \\frac{\\max(\\mathrm{in}_{p,l}, \\mathrm{out}_{p,l})}{B}\\Big)

with ``c_p`` worker ``p``'s compute in the ``oneshot`` epoch (:func:`simulator.epoch.simulate_epoch`; its
co-located workers' core sharing included), ``in_{p,l} = sum_q H_pq w_l b`` the halo bytes of layer ``l`` it
receives and ``out_{p,l} = sum_q H_qp w_l b`` those it sends, ``L``, ``g``, ``B`` the link's latency, gap and
bandwidth. ``S`` does not change the time (the bandwidth must carry one epoch's rows per epoch whatever the
delay), only memory: every layer keeps ``S + 1`` halo buffers (``S`` in flight, one in use) and the ``S`` send
buffers of its posted exchanges alive through the whole epoch (``sarlab/stale.py``'s queues), on top of the
extended ``[own; halo]`` matrices that ``oneshot`` builds too, so the peak grows by
``sum_l ((S + 1) in_{p,l} + S out_{p,l})``. (Measured once, SAGE on 40k nodes, N = 2 and 4: +28.7 and +31.5 MiB
over ``oneshot``, this formula +21 and +24 MiB; ``results/planner_validation.md``.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from simulator.costs import allreduce_seconds
from simulator.epoch import simulate_epoch
from simulator.layers import layer_plans
from simulator.model import ModelSpec
from simulator.profile import Link, Profile
from simulator.runspec import RunSpec, resolve_placement
from simulator.workload import PartitionStats


@dataclass(frozen=True)
class StaleEpoch:
    """A predicted stale epoch, per worker: compute, halo exchange time, epoch time, bytes the halo caches and
    posted sends hold (``cache_bytes``), peak."""

    staleness: int
    epoch_time_s: float
    compute_s: np.ndarray
    exchange_s: np.ndarray
    cache_bytes: np.ndarray
    peak_above_baseline_bytes: np.ndarray
    baseline_bytes: np.ndarray
    bytes_sent: np.ndarray
    bytes_recv: np.ndarray


def halo_bytes(stats: PartitionStats, widths: list[int], bytes_per_element: int) -> tuple[np.ndarray, np.ndarray]:
    """``(in, out)``: ``[P, L]`` halo bytes each worker receives and sends per layer (forward only)."""
    h = np.asarray(stats.halo_rows, dtype=np.float64)
    w = np.asarray(widths, dtype=np.float64) * bytes_per_element
    return np.outer(h.sum(axis=1), w), np.outer(h.sum(axis=0), w)


def exchange_seconds(recv: np.ndarray, send: np.ndarray, link: Link, workers: int) -> np.ndarray:
    """``x_p`` of the module docstring: every layer's exchange as a lone batch of ``N - 1`` messages each way."""
    if workers <= 1:
        return np.zeros(recv.shape[0])
    per_layer = link.latency_s + (workers - 1) * link.gap_s + np.maximum(recv, send) / link.bandwidth_Bps
    return per_layer.sum(axis=1)


def stale_epoch_time(compute_s: np.ndarray, exchange_s: np.ndarray, allreduce_s: float) -> float:
    """:math:`\\max_p \\max(c_p, x_p) + t_{allreduce}`."""
    return float(np.max(np.maximum(compute_s, exchange_s))) + float(allreduce_s)


def simulate_stale_epoch(stats: PartitionStats, model: ModelSpec, staleness: int, profile: Profile,
                         run: RunSpec | None = None) -> StaleEpoch:
    """Predict one steady-state epoch with staleness ``S >= 1`` (module docstring).

    Args:
        stats: partition statistics (``num_parts`` = workers).
        model: the model.
        staleness: ``S`` (>= 1; ``S = 0`` is the exact mode: use :func:`simulator.epoch.simulate_epoch`).
        profile: the machine profile.
        run: placement and threads (its mode is replaced by ``oneshot``).
    """
    if staleness < 1:
        raise ValueError(f"staleness must be >= 1 here (S = 0 is the exact mode), got {staleness}")
    run = replace(run or RunSpec(), mode="oneshot")
    N = stats.num_parts
    exact = simulate_epoch(stats, model, run, profile)
    plans = layer_plans(model, stats.feature_dim, stats.num_classes)
    b = model.bytes_per_element
    recv, send = halo_bytes(stats, [p.width for p in plans], b)
    place = resolve_placement(profile, N, run)
    link = profile.intra_host if place.workers_per_host >= N else profile.inter_host
    exchange = exchange_seconds(recv, send, link, N)
    params = sum(p.params for p in plans)
    epoch = stale_epoch_time(exact.compute_s, exchange, allreduce_seconds(link, params * b, N))
    cache, posted = recv.sum(axis=1), send.sum(axis=1)
    held = (staleness + 1) * cache + staleness * posted
    return StaleEpoch(staleness, epoch, exact.compute_s.copy(), exchange, held,
                      exact.peak_above_baseline_bytes + held, exact.baseline_bytes.copy(), posted, cache.copy())
