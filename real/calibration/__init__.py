"""Calibration steps that need the executor: the ``sarlab calibrate`` orchestrator and the microbenchmarks
that start ranks through the launcher or on the emulated network (progress spread, ring rounds, shaping
cost). The fitting lives in :mod:`sarlab.simulator.calibration`.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): the engine (``sarlab.common``, ``sarlab.data``,
``sarlab.core``, ``sarlab.nn``, ``sarlab.strategies``, ``sarlab.training``, ``sarlab.kernels``, ``sarlab.version``),
``sarlab.simulator``, ``sarlab.real.launch``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.data", "sarlab.core", "sarlab.nn", "sarlab.strategies", "sarlab.training",
    "sarlab.kernels", "sarlab.version", "sarlab.simulator", "sarlab.real.launch"
)
