"""Per-worker memory timeline: bytes allocated above the baseline, with its peak."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MemoryTracker:
    """Running total of one worker's allocations above the baseline.

    Changes are stamped with ``now``, the worker's own clock, which the epoch model moves forward as the
    worker computes and waits (it may run ahead of the simulation clock between synchronisations).

    Args:
        start: bytes already held at the start of the epoch (Adam state, caches from earlier epochs).
        trace: record ``(time, bytes)`` after every change.
    """

    start: float = 0.0
    trace: bool = False
    now: float = 0.0
    current: float = field(init=False)
    peak: float = field(init=False)
    peak_time: float = field(init=False, default=0.0)
    times: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.current = self.peak = float(self.start)
        if self.trace:
            self.times.append(0.0)
            self.values.append(self.current)

    def alloc(self, nbytes: float) -> None:
        """Add ``nbytes`` now (a no-op for 0)."""
        if nbytes:
            self.current += nbytes
            if self.current > self.peak:
                self.peak = self.current
                self.peak_time = self.now
            if self.trace:
                self.times.append(self.now)
                self.values.append(self.current)

    def free(self, nbytes: float) -> None:
        """Release ``nbytes`` now."""
        if nbytes:
            self.current -= nbytes
            if self.trace:
                self.times.append(self.now)
                self.values.append(self.current)
