"""Cost model: seconds for compute ops, point-to-point messages and all-reduces, from a :class:`Profile`."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from sarlab.simulator.hardware.host import colocation_eff
from sarlab.simulator.hardware.profile import OP_UNITS, Profile
from sarlab.simulator.workload.ops import Number, Op


class CostModel:
    """Prices :class:`Op` lists on one worker with ``threads`` threads.

    .. math::
        t(\\mathrm{op}) = \\sigma_{dtype} \\left[\\rho^{[bwd]} \\left(k\\,o + \\frac{w}{s(T)}\\Big(\\frac{h}{r}
        + \\frac{1-h}{r_{mem}}\\Big) + \\frac{v}{r_{row}\\,s(T)}\\right) + \\frac{u}{r_{fresh}\\,s(T)}\\right],
        \\qquad s(T) = 1 + (T-1)\\eta, \\qquad h = \\min(1, L / G)

    plus :math:`\\sigma\\,\\rho_e^{[bwd]}\\,e / (r_e\\,s(T))` for ``e`` edge visits (``Op.edges``) where the family has
    an ``edge_rate`` ``r_e`` (``rho_e``: its ``edge_bwd_ratio``, else ``rho``),
    with ``k`` calls, overhead ``o``, work ``w``, dense-output work ``v``, ``u`` bytes of fresh out-of-place
    output, rates ``r``, ``r_row`` and ``r_fresh`` (``fresh_rate``; no term without one), thread efficiency
    ``eta``, backward ratio ``rho`` (backward ops only) and ``sigma`` the dtype slowdown times ``scale``
    (default: the profile's ``compute_scale``; the epoch model passes :meth:`Profile.scale_at` of the
    configuration's scale key) times the family's factor (:attr:`Profile.family_scale`, 1 where absent).
    Sparse families whose profile has a ``mem_rate`` gather rows of a ``G``-byte matrix at random: a
    fraction ``h`` hits the last-level cache ``L`` (``Profile.llc_bytes``), the rest runs at ``r_mem``
    (``h = 1`` without a cache model).

    Args:
        profile: the machine profile.
        threads: compute threads of one worker.
        dtype: element type (selects the profile's dtype slowdown).
        scale: compute-cost multiplier (default ``profile.compute_scale``).
    """

    def __init__(self, profile: Profile, threads: float, dtype: str = "float32", scale: float | None = None) -> None:
        if threads <= 0:
            raise ValueError(f"threads must be > 0, got {threads}")
        self.profile = profile
        self.threads = float(threads)
        self.scale = profile.compute_scale if scale is None else float(scale)
        self.slowdown = float(profile.dtype_slowdown.get(dtype, 1.0)) * self.scale
        self._speedup: dict[str, float] = {}
        self._factor: dict[str, float] = {}
        for name in OP_UNITS:
            self._speedup[name] = profile.op(name).speedup(self.threads)
            self._factor[name] = self.slowdown * profile.family_scale.get(name, 1.0)

    def op_seconds(self, op: Op) -> Number:
        """Seconds of one :class:`Op` (array work gives an array of seconds)."""
        cost = self.profile.op(op.family)
        speed = self._speedup[op.family]
        llc = self.profile.llc_bytes
        if cost.mem_rate is not None and llc > 0 and np.any(np.asarray(op.gather_bytes) > 0):
            hit = np.minimum(1.0, llc / np.maximum(op.gather_bytes, 1.0))
            t = op.calls * cost.overhead_s + op.work * (hit / cost.rate + (1.0 - hit) / cost.mem_rate) / speed
        else:
            t = op.calls * cost.overhead_s + op.work / (cost.rate * speed)
        if cost.row_rate is not None:
            t = t + op.rows / (cost.row_rate * speed)
        if op.backward:
            t = t * cost.bwd_ratio
        if cost.edge_rate is not None and np.any(np.asarray(op.edges) > 0):
            t = t + (cost.edge_ratio if op.backward else 1.0) * op.edges / (cost.edge_rate * speed)
        if cost.fresh_rate is not None:
            t = t + op.fresh / (cost.fresh_rate * speed)
        return t * self._factor[op.family]

    def share_eff(self, ops: Iterable[Op], slots: float) -> float:
        """Efficiency of each extra co-located rank (of this model's threads) for a mix of ops (see
        :class:`sarlab.simulator.network.network.SharedCores`).

        With ``S = slots`` ranks running the same mix at once, op ``i`` of solo time ``t_i`` runs at
        ``s_i = 1 + (S-1) eta_i`` over ``S`` of its solo speed, so the mix runs at
        :math:`\\rho = \\sum t_i / \\sum (t_i S / s_i)` and its efficiency is :math:`(S \\rho - 1)/(S - 1)`;
        ``eta_i`` is the family's co-location efficiency of ``S`` ranks of ``T`` threads
        (:func:`sarlab.simulator.hardware.host.colocation_eff`).
        """
        if slots <= 1:
            return 1.0
        solo = shared = 0.0
        for op in ops:
            t = float(np.sum(self.op_seconds(op)))
            eta = colocation_eff(self.profile.op(op.family), int(round(slots)), self.threads)
            solo += t
            shared += t * slots / (1.0 + (slots - 1.0) * eta)
        if solo <= 0.0 or shared <= 0.0:
            return 1.0
        return float(min(1.0, max(0.0, (slots * solo / shared - 1.0) / (slots - 1.0))))

    def seconds(self, ops: Iterable[Op]) -> Number:
        """Total seconds of a list of ops (0.0 for an empty list)."""
        total: Number = 0.0
        for op in ops:
            total = total + self.op_seconds(op)
        return total
