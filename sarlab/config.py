"""Frozen configuration objects passed explicitly (no global state)."""
from __future__ import annotations

from dataclasses import dataclass

MODES = ("sar", "sa", "oneshot")


@dataclass(frozen=True)
class EngineConfig:
    """How a worker aggregates across partitions.

    Args:
        mode: ``sar`` (sequential aggregation and rematerialization), ``sa`` (sequential aggregation,
            fetched shards kept for backward), ``oneshot`` (all halo rows in one exchange).
        prefetch: number of ring rounds fetched ahead of the one being aggregated (``sar``/``sa``).
        kernels: ``auto``, ``cpp`` or ``torch`` for the fused attention kernels.
        fused: use fused attention kernels in GAT layers.
    """

    mode: str = "sar"
    prefetch: int = 1
    kernels: str = "auto"
    fused: bool = True

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"unknown mode {self.mode!r}: choose one of {', '.join(MODES)}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch depth must be >= 0, got {self.prefetch}")
        if self.kernels not in ("auto", "cpp", "torch"):
            raise ValueError(f"kernels must be auto, cpp or torch, got {self.kernels!r}")
