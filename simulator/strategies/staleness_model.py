"""Bounded-staleness halos (``--staleness S``, ``sarlab/strategies/stale.py``), priced from the exact ``oneshot`` epoch.

With ``S >= 1`` a worker aggregates ``[own rows; cached halo rows]`` in one shard, as ``oneshot`` does, but the
halo rows come from a fetch posted ``S`` epochs earlier, and no gradient goes back for them. Every layer's
exchange is posted at the start of the layer and waited for ``S`` epochs later, so in steady state the link has
one epoch's compute to move one epoch's halo bytes, and only what does not fit shows:

.. math::
    t_{epoch} = \\max_p \\max\\big(c_p,\\ x_p\\big) + t_{allreduce}, \\qquad
    x_p = \\sum_l \\Big(L + (N-1)\\,g + \\frac{\\max(\\mathrm{in}_{p,l}, \\mathrm{out}_{p,l})}{B}\\Big)

with ``c_p`` worker ``p``'s compute in the ``oneshot`` epoch (:func:`sarlab.simulator.system.epoch.simulate_epoch`; its
co-located workers' core sharing included), ``in_{p,l} = sum_q H_pq w_l b`` the halo bytes of layer ``l`` it
receives and ``out_{p,l} = sum_q H_qp w_l b`` those it sends, ``L``, ``g``, ``B`` the latency, gap and bandwidth
of the link the workers' messages take (:func:`sarlab.simulator.strategies.sampling_model.message_link`: the inter-host
link between hosts or emulated hosts, ``B`` shared by a NIC's workers; the intra-host link otherwise). A stale epoch
does the work of an exact ``oneshot`` one (``sarlab/strategies/stale.py``): every layer gathers its rows for the peers,
concatenates ``[own; halo]`` and aggregates over the merged shard, forward and backward; it drops only the waits for the
halo rows and the return of the halo gradients (no gradient goes back for stale rows). ``S`` does not change the time
(the bandwidth must carry one epoch's rows per epoch whatever the delay), only memory: a layer's queue holds the
``S + 1`` posted exchanges from epoch ``e - S`` to ``e`` through the epoch (``S`` in flight, one in use), each with
its received halo rows and the copies of the rows it sent (released only when the entry leaves the queue), on top
of the extended ``[own; halo]`` matrices that ``oneshot`` builds too, so the peak grows by
``sum_l (S + 1) (in_{p,l} + out_{p,l})``. (Measured once, SAGE on 40k nodes, N = 2 and 4: +28.7 and +31.5 MiB over
``oneshot``; the formula before this one, ``(S + 1) in + S out``, gave +21 and +24 MiB, so this one about +28
and +32 MiB where ``in`` and ``out`` are about equal; ``results/sampling/planner_validation.md``.)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from sarlab.simulator.hardware.profile import Link, Profile
from sarlab.simulator.network.collectives import allreduce_seconds
from sarlab.simulator.strategies.sampling_model import message_link
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.runspec import RunSpec, resolve_placement
from sarlab.simulator.workload.layers import layer_plans
from sarlab.simulator.workload.model import ModelSpec
from sarlab.simulator.workload.workload import PartitionStats


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


def exchange_seconds(recv: np.ndarray, send: np.ndarray, link: Link, workers: int, nic_share: int = 1) -> np.ndarray:
    """``x_p`` of the module docstring: every layer's exchange as a lone batch of ``N - 1`` messages each way, its
    bytes through a NIC that ``nic_share`` workers share."""
    if workers <= 1:
        return np.zeros(recv.shape[0])
    per_layer = link.latency_s + (workers - 1) * link.gap_s + np.maximum(recv, send) * nic_share / link.bandwidth_Bps
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
        staleness: ``S`` (>= 1; ``S = 0`` is the exact mode: use :func:`sarlab.simulator.system.epoch.simulate_epoch`).
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
    link, nic_share = message_link(profile, resolve_placement(profile, N, run), N)
    exchange = exchange_seconds(recv, send, link, N, nic_share)
    params = sum(p.params for p in plans)
    epoch = stale_epoch_time(exact.compute_s, exchange, allreduce_seconds(link, params * b, N))
    cache, posted = recv.sum(axis=1), send.sum(axis=1)
    held = (staleness + 1) * (cache + posted)
    return StaleEpoch(staleness, epoch, exact.compute_s.copy(), exchange, held,
                      exact.peak_above_baseline_bytes + held, exact.baseline_bytes.copy(), posted, cache.copy())
