"""Per-op compute costs (:class:`OpCost`) and point-to-point links (:class:`Link`) of a machine profile.

An op family's cost on one rank of ``T`` threads uses its thread speed-up ``s(T)``: measured at the thread counts a
run uses where calibration timed them (:attr:`OpCost.speedups`, interpolated), else ``1 + (T-1) eta`` from one
efficiency. How co-located ranks of ``T`` threads slow each other (:attr:`OpCost.colocation`) is read by the host
model (:mod:`sarlab.simulator.hardware.host`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def table_pairs(value, what: str) -> tuple[tuple[float, float], ...]:
    """``((x, y), ...)`` sorted by ``x`` from pairs or a ``{x: y}`` mapping (JSON lists or keys as text); raises
    ValueError, naming ``what``, for an ``x`` below 1 or a negative ``y``."""
    items = value.items() if isinstance(value, dict) else (value or ())
    pairs = tuple(sorted((float(x), float(y)) for x, y in items))
    if any(x < 1 or y < 0 for x, y in pairs):
        raise ValueError(f"{what} needs thread counts >= 1 and values >= 0, got {pairs}")
    return pairs


@dataclass(frozen=True)
class OpCost:
    """Cost of one op family on one thread.

    .. math::
        t_{fwd}(w, v, e, T) = k\\,o + \\frac{w}{r\\,s(T)} + \\frac{v}{r_{row}\\,s(T)} + \\frac{e}{r_e\\,s(T)},
        \\qquad s(T) = 1 + (T-1)\\,\\eta, \\qquad
        t_{bwd} = \\rho \\Big(k\\,o + \\frac{w}{r\\,s(T)} + \\frac{v}{r_{row}\\,s(T)}\\Big)
        + \\rho_e \\frac{e}{r_e\\,s(T)}

    for ``k`` calls with work ``w``, dense-output work ``v`` (row*feature) and ``e`` edge visits on ``T`` threads;
    where ``s(T)`` was measured at several thread counts (``speedups``) it is read from them instead: linear between
    the measured counts (and ``s(1) = 1``), the last segment's slope beyond them.

    Args:
        rate: work units per second on one thread (unit: :data:`OP_UNITS`).
        overhead_s: fixed cost ``o`` of one call (dispatch, allocation of the output).
        bwd_ratio: backward time over forward time for the same work, ``rho``.
        parallel_eff: efficiency ``eta`` of each extra thread (1 = linear speed-up, 0 = none).
        row_rate: row*feature units per second of the op's dense output (sparse families write a whole
            ``n x w`` state per shard); ``None`` = no such term.
        share_eff: efficiency of each extra single-thread *process* running this op on the same host at
            the same time (they share the memory system): ``S`` such processes together do
            ``1 + (S-1) share_eff`` times the work of one; ``None`` = ``parallel_eff``.
        mem_rate: work units per second of the edge work when the rows it gathers at random come from
            memory rather than the last-level cache (:attr:`Profile.llc_bytes`); ``None`` = ``rate`` always.
        fresh_rate: bytes per second of an out-of-place result on new pages (``Op.fresh``): what such a
            call costs beyond the same product added in place into touched memory; ``None`` = no such term.
        edge_rate: edge visits per second (``Op.edges``: edges x heads for GAT, edges x passes for SpMM): the cost
            of an edge that does not grow with the features (the index walk, GAT's per-head score, softmax and
            weight); ``None`` = no such term (profiles calibrated before it, the presets).
        edge_bwd_ratio: ``rho_e``, the backward's edge term over the forward's; ``None`` = ``bwd_ratio``.
        speedups: ``((T, s(T)), ...)``: the speed-up of one process at ``T`` threads over one thread, measured at
            the thread counts runs use (1, 2, 4, ... cores); empty = ``1 + (T-1) parallel_eff``.
        colocation: ``((T, eta_T), ...)``: the efficiency of each extra co-located rank of ``T`` threads (``C / T``
            such ranks measured at once on ``C`` cores: together they do ``1 + (C/T - 1) eta_T`` times the work of
            one); empty = derived by the host model (:func:`sarlab.simulator.hardware.host.colocation_eff`).
    """

    rate: float
    overhead_s: float = 0.0
    bwd_ratio: float = 2.0
    parallel_eff: float = 0.8
    row_rate: float | None = None
    share_eff: float | None = None
    mem_rate: float | None = None
    fresh_rate: float | None = None
    speedups: tuple[tuple[float, float], ...] = ()
    colocation: tuple[tuple[float, float], ...] = ()
    edge_rate: float | None = None
    edge_bwd_ratio: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "speedups", table_pairs(self.speedups, "OpCost.speedups"))
        object.__setattr__(self, "colocation", table_pairs(self.colocation, "OpCost.colocation"))
        if any(eta > 1 for _, eta in self.colocation):
            raise ValueError(f"OpCost.colocation efficiencies must be in [0, 1], got {self.colocation}")
        if not (self.rate > 0):
            raise ValueError(f"OpCost.rate must be > 0, got {self.rate}")
        if self.row_rate is not None and not (self.row_rate > 0):
            raise ValueError(f"OpCost.row_rate must be > 0 or None, got {self.row_rate}")
        if self.overhead_s < 0 or self.bwd_ratio < 0 or not (0 <= self.parallel_eff <= 1):
            raise ValueError("OpCost needs overhead_s >= 0, bwd_ratio >= 0 and 0 <= parallel_eff <= 1")
        if self.mem_rate is not None and not (self.mem_rate > 0):
            raise ValueError(f"OpCost.mem_rate must be > 0 or None, got {self.mem_rate}")
        if self.fresh_rate is not None and not (self.fresh_rate > 0):
            raise ValueError(f"OpCost.fresh_rate must be > 0 or None, got {self.fresh_rate}")
        if self.edge_rate is not None and not (self.edge_rate > 0):
            raise ValueError(f"OpCost.edge_rate must be > 0 or None, got {self.edge_rate}")
        if self.edge_bwd_ratio is not None and not (self.edge_bwd_ratio >= 0):
            raise ValueError(f"OpCost.edge_bwd_ratio must be >= 0 or None, got {self.edge_bwd_ratio}")
        if self.share_eff is not None and not (0 <= self.share_eff <= 1):
            raise ValueError(f"OpCost.share_eff must be in [0, 1] or None, got {self.share_eff}")

    @property
    def process_eff(self) -> float:
        """``share_eff``, or ``parallel_eff`` where co-located processes were not measured."""
        return self.parallel_eff if self.share_eff is None else self.share_eff

    @property
    def edge_ratio(self) -> float:
        """``rho_e``: the backward's edge term over the forward's, ``bwd_ratio`` where not fitted apart."""
        return self.bwd_ratio if self.edge_bwd_ratio is None else self.edge_bwd_ratio

    def speedup(self, threads: float) -> float:
        """:math:`s(T)`: from :attr:`speedups` where measured (see the class docstring), else
        :math:`1 + (T-1)\\eta`."""
        t = max(float(threads), 1.0)
        if not self.speedups:
            return 1.0 + (t - 1.0) * self.parallel_eff
        xs = [1.0] + [x for x, _ in self.speedups if x > 1.0]
        ys = [1.0] + [y for x, y in self.speedups if x > 1.0]
        if t <= xs[-1]:
            return float(np.interp(t, xs, ys))
        slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0) if len(xs) > 1 else self.parallel_eff
        return ys[-1] + (t - xs[-1]) * slope

    def colocation_at(self, threads: float) -> float | None:
        """The measured co-location efficiency of ranks of ``threads`` threads (:attr:`colocation`): linear in
        log(threads) between measured counts, the nearest beyond them; ``None`` where none was measured."""
        if not self.colocation:
            return None
        xs = np.log([x for x, _ in self.colocation])
        return float(np.interp(np.log(max(float(threads), 1.0)), xs, [y for _, y in self.colocation]))

    def throughput(self, threads: float) -> float:
        """Work units per second with ``threads`` threads: :math:`r\\,s(T)`."""
        return self.rate * self.speedup(threads)


@dataclass(frozen=True)
class Link:
    """Alpha-beta model of a point-to-point link, with the per-message channel time split from latency.

    A lone message of ``b`` bytes takes :math:`\\alpha + b/B` with :math:`\\alpha = L + g`: it occupies
    the sender's and receiver's NIC channels for :math:`g + b/B` and arrives :math:`L` later, so the
    latencies of back-to-back messages overlap while their bytes and gaps queue.

    Args:
        latency_s: ``L``, delivery latency that does not occupy the channels.
        bandwidth_Bps: ``B`` = 1/beta, bytes per second of one direction of one NIC.
        gap_s: ``g``, channel time per message (per-message software/NIC cost).
    """

    latency_s: float
    bandwidth_Bps: float
    gap_s: float = 0.0

    def __post_init__(self) -> None:
        if self.latency_s < 0 or self.gap_s < 0 or not (self.bandwidth_Bps > 0):
            raise ValueError("Link needs latency_s >= 0, gap_s >= 0 and bandwidth_Bps > 0")

    @property
    def alpha_s(self) -> float:
        """Time of an empty lone message: :math:`L + g`."""
        return self.latency_s + self.gap_s

    def occupancy(self, nbytes: float) -> float:
        """Seconds a message holds its NIC channels: :math:`g + b/B`."""
        return self.gap_s + nbytes / self.bandwidth_Bps

    def time(self, nbytes: float) -> float:
        """Seconds to move ``nbytes`` as a lone message: :math:`L + g + b/B`."""
        return self.latency_s + self.gap_s + nbytes / self.bandwidth_Bps
