"""Benchmarks that run the engine for real: per-worker memory and epoch time vs workers, side-by-side engine
and kernel speed, fused GAT kernels, network links, the strategies head-to-head.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): the engine (``sarlab.common``, ``sarlab.data``,
``sarlab.core``, ``sarlab.nn``, ``sarlab.strategies``, ``sarlab.training``, ``sarlab.kernels``, ``sarlab.version``),
``sarlab.simulator``, ``sarlab.real``, ``sarlab.real.launch``, ``sarlab.real.calibration``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.data", "sarlab.core", "sarlab.nn", "sarlab.strategies", "sarlab.training",
    "sarlab.kernels", "sarlab.version", "sarlab.simulator", "sarlab.real", "sarlab.real.launch",
    "sarlab.real.calibration"
)
