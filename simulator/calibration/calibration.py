"""Settings of one calibration run (:class:`Calibration`) and what it writes down on the way (:class:`Findings`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Printer = Callable[[str], None]


@dataclass(frozen=True)
class Calibration:
    """Settings of one calibration run.

    Args:
        quick: small shapes and few repeats, for tests and smoke runs (~1 min by the step budget of
            :mod:`sarlab.real.calibration.budget` on a quiet machine; 10-11 min measured on the 2-core VM under a
            load of 20-25).
        network: run the two-process gloo benchmark.
        fused: time the fused GAT kernels when ``kernels`` provides them.
        threads: thread count for the "all cores" measurement (default: usable cores).
        seed: random graphs' seed.
        quiet_tries: runs of a timing step at most, while other processes keep using the cores during it
            (see :func:`sarlab.real.calibration.harness.quiet_step`); 1 = no retry.
        quiet_wait_s: seconds to wait for an idle machine before each try.
        engine: fit :attr:`Profile.compute_scale` from real engine epochs
            (:func:`sarlab.real.calibration.engine_runs.bench_engine`).
        scale_key: what the fitted curve is keyed by (:attr:`Profile.compute_scale_key`): ``"peak"`` (the
            default) or ``"activation"``.
        share_pairs: adjacent solo / co-located window pairs per op family in
            :func:`sarlab.real.calibration.hostbench.bench_share` (median taken).
        thread_rounds: rounds of each op's thread speed-ups, one thread then 1, 2, 4, ... cores (median taken).
        log: progress printer.
    """

    quick: bool = False
    network: bool = True
    fused: bool = True
    threads: int | None = None
    seed: int = 0
    quiet_tries: int = 3
    quiet_wait_s: float = 30.0
    engine: bool = True
    scale_key: str = "peak"
    share_pairs: int = 3
    thread_rounds: int = 3
    log: Printer = print

    @property
    def repeats(self) -> int:
        """Timed runs of each call (the median or best is kept,
        :func:`sarlab.real.calibration.harness.time_call`)."""
        return 3 if self.quick else 5


@dataclass
class Findings:
    """What a calibration run records besides the fitted numbers.

    Args:
        notes: provenance lines that end up in :attr:`Profile.notes` (what was not measured and why).
        raw: raw timings per step, kept in the profile's ``meta["raw"]``.
    """

    notes: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
