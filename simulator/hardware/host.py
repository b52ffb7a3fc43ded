"""The host model: how ``P`` ranks of ``T`` threads share one host of ``C`` cores, its memory bandwidth and its
loopback transport.

Two regimes, told apart by :func:`regime`:

* **ranks fit the cores** (``P T <= C``): each rank's compute runs on its own ``T`` cores, in parallel with the
  other ranks', at its thread speed-up ``s(T)`` (:meth:`sarlab.simulator.hardware.opcost.OpCost.speedup`, measured at
  the thread counts runs use). What co-located ranks share is the memory system: while ``k`` of them compute, each
  progresses at :math:`(1 + (k-1)\\,\\eta_T) / k` of its solo speed
  (:class:`sarlab.simulator.network.network.SharedCores`), with ``eta_T`` the co-location efficiency of ranks of
  ``T`` threads (:func:`colocation_eff`). Where it was not measured, it follows from the thread speed-ups: ``P``
  ranks of ``T`` threads together run as one process of ``P T`` threads would,

  .. math::
      1 + (P-1)\\,\\eta_T = \\frac{s(P T)}{s(T)}, \\qquad
      t_{rank} = \\frac{W / P}{r\\,s(T)} \\cdot \\frac{P\\,s(T)}{s(P T)} = \\frac{W}{r\\,s(P T)},

  so ``P`` ranks of ``C / P`` threads price compute like one rank of ``C`` threads (never ``P`` times that: the work
  is not serialised), and where the ranks' co-location was measured at 1 (compute-bound families, no shared
  bandwidth) each rank takes :math:`(W/P) / (r\\,s(C/P))`.
* **crowded** (``P T > C``): only ``S = floor(C / T)`` ranks compute at once; the rest take turns (processor sharing,
  :class:`~sarlab.simulator.network.network.SharedCores` with ``S`` slots), and the ranks that run share the memory
  system as above. How unevenly the time-sliced ranks progress between exchanges is the measured progress spread
  (:mod:`sarlab.simulator.system.spread`), keyed by the thread-equivalents ``P T`` on ``C`` cores
  (:func:`spread_sigma`). Ranks that fill their cores exactly (``P T = C``, ``P > 1``) draw it too (the backend's
  threads and the OS then time-slice them); ranks that leave cores free draw none.

Loopback copies (point-to-point bytes between ranks of one host, :attr:`Profile.p2p_cpu_s_per_byte`, and the
backend's CPU per message) are CPU work on the ranks' own cores: each exchange's copy joins its host's
:class:`~sarlab.simulator.network.network.SharedCores` beside the ranks' compute, so the copies of different pairs run
in parallel on free cores, share the cores of busy ranks, and slow down together as the elementwise family's
co-location efficiency says once memory bandwidth binds.
"""

from __future__ import annotations

import numpy as np

from sarlab.simulator.hardware.opcost import OpCost

#: the two host-model regimes, as :func:`regime` names them
FIT, CROWDED = "ranks fit the cores", "crowded"


def regime(ranks: int, threads: float, cores: int) -> str:
    """:data:`FIT` where ``ranks`` ranks of ``threads`` threads fit ``cores`` cores (``P T <= C``), else
    :data:`CROWDED`."""
    return FIT if ranks * max(threads, 1.0) <= cores + 1e-9 else CROWDED


def running_ranks(ranks: int, threads: float, cores: int) -> int:
    """How many of the host's ranks compute at once: all of them where they fit, ``floor(C / T)`` where crowded."""
    return max(1, min(int(ranks), int(cores // max(threads, 1.0)) or 1))


def colocation_eff(cost: OpCost, ranks: int, threads: float) -> float:
    """``eta_T``: the efficiency of each extra co-located rank of ``threads`` threads, ``ranks`` of them computing
    at once (see the module docstring).

    Measured (:meth:`OpCost.colocation_at`) where calibration timed ranks of about that many threads; for one
    thread, the measured single-thread ``share_eff``; otherwise derived from the thread speed-ups,
    :math:`\\eta_T = (s(P T) / s(T) - 1) / (P - 1)`, clipped to [0, 1] (``parallel_eff`` where the profile has one
    thread efficiency and no table).
    """
    if ranks <= 1:
        return 1.0
    measured = cost.colocation_at(threads)
    if measured is not None:
        return min(1.0, max(0.0, measured))
    if threads <= 1.0 and cost.share_eff is not None:
        return cost.share_eff
    ratio = cost.speedup(ranks * threads) / cost.speedup(threads)
    return min(1.0, max(0.0, (ratio - 1.0) / (ranks - 1.0)))


def spread_sigma(table: dict[int, float], ranks: int, threads: float, cores: int) -> float:
    """The progress spread of ``ranks`` ranks of ``threads`` threads on ``cores`` cores: 0 for one rank or ranks
    with spare cores (``P T < C``), else the spread ``table`` (measured with single-thread ranks on these cores)
    at ``P T`` thread-equivalents."""
    equivalents = ranks * max(threads, 1.0)
    if ranks < 2 or equivalents < cores - 1e-9 or not table:
        return 0.0
    keys = sorted(table)
    return float(np.interp(equivalents, keys, [table[k] for k in keys]))
