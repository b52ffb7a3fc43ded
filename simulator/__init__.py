"""sarlab.simulator: a SimPy model of distributed full-batch GNN training (``sar``, ``sa``, ``oneshot``).

It predicts per-rank epoch time, compute/wait split, bytes and peak memory above the baseline from
partition statistics (a partition's ``manifest.json`` or an estimate) and a machine profile
(``sarlab calibrate`` or a preset), and validates those predictions against real metric records. It never
imports the engine's runtime.

Entry points: :func:`simulate_epoch` (one configuration), :func:`simulate_sweep` (modes x models x
workers as a metric-record DataFrame), :mod:`simulator.cli` (``sarlab calibrate`` / ``sarlab simulate``).
"""

from simulator.epoch import EpochResult, RunSpec, simulate_epoch
from simulator.layers import ModelSpec
from simulator.profile import Profile, load_profile, save_profile
from simulator.sweep import simulate_sweep
from simulator.workload import GRAPH_PRESETS, PartitionStats, estimate_partition, load_manifest

__all__ = [
    "GRAPH_PRESETS",
    "EpochResult",
    "ModelSpec",
    "PartitionStats",
    "Profile",
    "RunSpec",
    "estimate_partition",
    "load_manifest",
    "load_profile",
    "save_profile",
    "simulate_epoch",
    "simulate_sweep",
]
