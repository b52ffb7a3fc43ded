"""``sarlab reproduce``: the plan of figure recipes, its units (measured here or simulated), the step cache,
and the measured figures 7 and 8 and the accuracy table.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): the engine (``sarlab.common``, ``sarlab.data``,
``sarlab.core``, ``sarlab.nn``, ``sarlab.strategies``, ``sarlab.training``, ``sarlab.kernels``, ``sarlab.version``),
``sarlab.simulator``, ``sarlab.real``, ``sarlab.real.launch``, ``sarlab.real.bench``, ``sarlab.real.calibration``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.data", "sarlab.core", "sarlab.nn", "sarlab.strategies", "sarlab.training",
    "sarlab.kernels", "sarlab.version", "sarlab.simulator", "sarlab.real", "sarlab.real.launch",
    "sarlab.real.bench", "sarlab.real.calibration"
)
