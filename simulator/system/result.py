"""What one simulated epoch gives: per-rank predictions (:class:`EpochResult`) and, traced, its Gantt bars."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sarlab.simulator.system.runspec import Placement


@dataclass
class Interval:
    """One bar of the Gantt chart: ``kind`` is ``compute``, ``wait`` (p2p) or ``allreduce``."""

    start: float
    end: float
    kind: str
    what: tuple


@dataclass
class EpochResult:
    """Per-rank predictions of one steady-state epoch, plus traces when requested.

    Attributes:
        epoch_time_s, compute_s, comm_wait_s, bytes_sent, bytes_recv, peak_above_baseline_bytes,
        baseline_bytes: arrays with one entry per rank.
        intervals: per rank, the Gantt bars (trace only).
        transfers: every point-to-point message (trace only).
        memory: per rank, ``(times, bytes)`` above the baseline (trace only).
        events: SimPy events processed; messages: point-to-point messages simulated.
        wall_s, cpu_s: wall-clock and process CPU seconds of the run.
        start_bytes, end_bytes: bytes above the baseline held at the start and end of the epoch (equal
            when every allocation of the epoch was freed: a self-check of the memory model).
        activation_bytes: a worker's mean ``nodes x widest layer`` activation; scale_key_bytes: the bytes
            the compute scale was looked up at (the activation, or the predicted peak for a profile whose
            ``compute_scale_key`` is ``"peak"``); compute_scale: the multiplier of the compute costs
            (:meth:`sarlab.simulator.hardware.profile.Profile.scale_at` of ``scale_key_bytes``).
    """

    mode: str
    workers: int
    epoch_time_s: np.ndarray
    compute_s: np.ndarray
    comm_wait_s: np.ndarray
    bytes_sent: np.ndarray
    bytes_recv: np.ndarray
    peak_above_baseline_bytes: np.ndarray
    baseline_bytes: np.ndarray
    placement: Placement
    events: int = 0
    messages: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    intervals: list[list[Interval]] = field(default_factory=list)
    transfers: list[Any] = field(default_factory=list)
    memory: list[tuple[list[float], list[float]]] = field(default_factory=list)
    start_bytes: np.ndarray | None = None
    end_bytes: np.ndarray | None = None
    activation_bytes: float = 0.0
    scale_key_bytes: float = 0.0
    compute_scale: float = 1.0

    @property
    def events_per_s(self) -> float:
        return self.events / self.wall_s if self.wall_s > 0 else float("inf")
