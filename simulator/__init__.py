"""sarlab.simulator: a SimPy model of distributed full-batch GNN training (``sar``, ``sa``, ``oneshot``).

It predicts per-rank epoch time, compute/wait split, bytes and peak memory above the baseline from
partition statistics (a partition's ``manifest.json`` or an estimate) and a machine profile (shipped in
``simulator/profiles/``, made by ``sarlab calibrate``, or a preset), and validates those predictions against
real metric records. It never imports the engine's runtime.

Entry points: :func:`simulate` and :func:`plan` (:mod:`sarlab.simulator.api`, also ``sarlab.simulate`` /
``sarlab.plan``: the Python forms of ``sarlab simulate`` and ``sarlab plan``), :func:`simulate_epoch` (one
configuration), :func:`simulate_sweep` (modes x models x workers as a metric-record DataFrame). The commands are
the executor's (:mod:`sarlab.real.commands.simulate_cmd`, :mod:`sarlab.real.commands.plan_cmd`,
:mod:`sarlab.real.commands.calibrate_cmd`). The module
map is in ``simulator/README.md``.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): ``sarlab.common``, ``sarlab.data``,
``sarlab.simulator.hardware``, ``sarlab.simulator.workload``, ``sarlab.simulator.network``,
``sarlab.simulator.system``, ``sarlab.simulator.strategies``, ``sarlab.simulator.calibration``,
``sarlab.simulator.studies``.
"""

from sarlab.simulator.api import plan, simulate
from sarlab.simulator.hardware.profile import PRESETS, Profile, load_profile, save_profile
from sarlab.simulator.hardware.provenance import resolve_profile
from sarlab.simulator.system.epoch import simulate_epoch
from sarlab.simulator.system.result import EpochResult
from sarlab.simulator.system.runspec import RunSpec
from sarlab.simulator.system.sweep import simulate_sweep, summarize_sweep
from sarlab.simulator.workload.model import ModelSpec, parse_model
from sarlab.simulator.workload.workload import GRAPH_PRESETS, PartitionStats, estimate_partition, load_manifest

__all__ = [
    "GRAPH_PRESETS",
    "PRESETS",
    "EpochResult",
    "ModelSpec",
    "PartitionStats",
    "Profile",
    "RunSpec",
    "estimate_partition",
    "load_manifest",
    "load_profile",
    "parse_model",
    "plan",
    "resolve_profile",
    "save_profile",
    "simulate",
    "simulate_epoch",
    "simulate_sweep",
    "summarize_sweep",
]

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.data", "sarlab.simulator.hardware", "sarlab.simulator.workload",
    "sarlab.simulator.network", "sarlab.simulator.system", "sarlab.simulator.strategies",
    "sarlab.simulator.calibration", "sarlab.simulator.studies"
)
