"""Uneven progress of time-shared workers: each worker's compute between two exchange calls runs a random factor slow.

When more single-thread workers share a host than it has cores, the OS does not slice the cores evenly between
memory-bound processes: measured by :mod:`sarlab.real.calibration.progressbench`, the ranks' compute between two
barriers differs by ~5 % (2 ranks on 2 cores) to ~20-25 % (4 ranks) per round, and a round that ends at its slowest
rank waits for it. The simulator draws a factor per worker and *segment* (the compute between its ``k``-th and
``k+1``-th exchange call) and multiplies that segment's compute by it:

.. math::
    f_{rk} = \\max\\left(F_{\\min},\\ 1 + \\sigma_P z_{rk}\\right), \\qquad
    z_{rk} = \\sqrt{-2 \\ln u_1} \\cos(2 \\pi u_2)

(Box-Muller; ``u_1, u_2`` from the counter-based hash of :mod:`sarlab.simulator.system.jitter` with this module's salt,
so both executors draw the same factors), ``sigma_P`` from
:attr:`sarlab.simulator.hardware.profile.Profile.progress_spread` for the ``P`` workers of a host (0 on cluster presets:
one worker per core).

``sigma_P`` is not the measured per-round coefficient of variation itself: on shared cores (processor sharing,
:class:`sarlab.simulator.network.network.SharedCores`) a fast worker's finishing gives the others its share, which
narrows the spread of finishing times. :func:`fit_sigma` therefore picks the ``sigma`` with which barrier rounds of
``P`` processor-shared jobs on ``S`` slots lose what the probe measured (slowest over mean rank's round time):

.. math::
    \\text{loss}(\\sigma) = \\frac{\\sum_k \\max_r t_{rk}}{\\sum_k \\operatorname{mean}_r t_{rk}}
"""

from __future__ import annotations

import numpy as np

from sarlab.simulator.system.jitter import counter_uniform

#: salt of the spread draws (kept apart from the jitter draws of the same rank and call)
_SALT = 0x5851F42D4C957F2D
#: the smallest factor drawn (a segment never runs more than 1 / F_MIN faster than its mean)
F_MIN = 0.2
#: barrier rounds :func:`fit_sigma` simulates per trial sigma
FIT_ROUNDS = 4000


def _uniform(seed: int, ranks: np.ndarray, counts: np.ndarray, stream: int) -> np.ndarray:
    """Stream ``stream`` (0 or 1) of the salted counter draws, shifted half a step into ``(0, 1)`` (for the log)."""
    return counter_uniform(seed, ranks, counts * np.uint64(2) + np.uint64(stream), _SALT) + 2.0**-54


def spread_factors(sigma: float, seed: int, ranks, counts) -> np.ndarray:
    """``f_rk`` of the module docstring for the ``counts``-th segments of ``ranks`` (arrays of equal shape)."""
    ranks = np.asarray(ranks, dtype=np.uint64)
    counts = np.asarray(counts, dtype=np.uint64)
    if sigma <= 0.0:
        return np.ones(np.shape(ranks))
    u1, u2 = _uniform(seed, ranks, counts, 0), _uniform(seed, ranks, counts, 1)
    z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2.0 * np.pi * u2)
    return np.maximum(F_MIN, 1.0 + sigma * z).reshape(np.shape(ranks))


def shared_finish(work: np.ndarray, slots: float) -> np.ndarray:
    """Finishing times of jobs started together on ``slots`` processor-shared slots (rows: independent rounds).

    While ``k`` jobs remain each progresses at ``min(k, S) / k`` of its solo speed (the sharing of
    :class:`sarlab.simulator.network.network.SharedCores` with ``eta = 1``).
    """
    work = np.sort(np.atleast_2d(np.asarray(work, dtype=np.float64)), axis=1)
    rounds, P = work.shape
    finish = np.empty_like(work)
    t = np.zeros(rounds)
    done = np.zeros(rounds)  # work every remaining job has done so far
    for i in range(P):
        k = P - i
        rate = min(k, slots) / k
        t = t + (work[:, i] - done) / rate
        done = work[:, i]
        finish[:, i] = t
    return finish


def barrier_loss(sigma: float, workers: int, slots: float, rounds: int = FIT_ROUNDS, seed: int = 0) -> float:
    """``loss(sigma)`` of the module docstring: barrier rounds of ``workers`` jobs of mean work 1 each."""
    ranks = np.repeat(np.arange(workers)[None, :], rounds, axis=0)
    counts = np.repeat(np.arange(rounds)[:, None], workers, axis=1)
    finish = shared_finish(spread_factors(sigma, seed, ranks, counts), slots)
    return float(finish.max(axis=1).sum() / finish.mean(axis=1).sum())


def fit_sigma(loss: float, workers: int, slots: float, hi: float = 1.5, steps: int = 40) -> float:
    """The ``sigma`` whose :func:`barrier_loss` is ``loss`` (bisection; 0 for ``loss <= 1`` or one worker)."""
    if workers < 2 or loss <= 1.0:
        return 0.0
    lo_s, hi_s = 0.0, hi
    if barrier_loss(hi_s, workers, slots) < loss:
        return hi_s
    for _ in range(steps):
        mid = 0.5 * (lo_s + hi_s)
        if barrier_loss(mid, workers, slots) < loss:
            lo_s = mid
        else:
            hi_s = mid
    return 0.5 * (lo_s + hi_s)


def sigma_for(table: dict[int, float], workers_per_host: int) -> float:
    """``sigma_P`` for ``P`` workers on a host from a table measured at some ``P``: linear between measured
    counts, the nearest measured one beyond them, 0 for one worker or an empty table."""
    if workers_per_host < 2 or not table:
        return 0.0
    keys = sorted(table)
    return float(np.interp(workers_per_host, keys, [table[k] for k in keys]))
