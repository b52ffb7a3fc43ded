"""Per-round jitter: the random delay each exchange call suffers before it posts, the same in every executor.

A delay is exponential with mean ``mu`` (:attr:`sarlab.simulator.hardware.profile.Profile.round_jitter_s`), drawn from a
counter-based hash of ``(seed, rank, k)`` for the ``k``-th exchange call of a rank, so that the per-worker
event simulation and the lockstep one (:mod:`sarlab.simulator.system.lockstep`) draw the same delays without sharing a
random stream:

.. math::
    d = -\\mu \\ln(1 - u), \\qquad u = \\mathrm{splitmix64}(\\mathrm{seed}, \\mathrm{rank}, k) / 2^{64}
"""

from __future__ import annotations

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_RANK = np.uint64(0xD1B54A32D192ED03)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on a uint64 array (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def counter_uniform(seed: int, ranks, counts, salt: int = 0) -> np.ndarray:
    """``u in [0, 1)`` per element of ``ranks`` / ``counts`` (arrays of equal shape, or scalars), a pure function of
    ``(seed, rank, count)``: splitmix64's finaliser of ``((seed + 1) G + (rank + 1) R + count) xor salt``, its top
    53 bits; 1-d."""
    ranks = np.asarray(ranks, dtype=np.uint64)
    counts = np.asarray(counts, dtype=np.uint64)
    with np.errstate(over="ignore"):
        key = (np.uint64(seed + 1) * _GOLDEN + (ranks + np.uint64(1)) * _RANK + counts) ^ np.uint64(salt)
        return (_mix(np.atleast_1d(key)) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def jitter_delays(mean: float, seed: int, ranks: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Delays of the ``counts``-th exchange calls of ``ranks`` (arrays of equal shape), seconds."""
    return -mean * np.log1p(-counter_uniform(seed, ranks, counts)).reshape(np.shape(ranks))
