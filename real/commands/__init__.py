"""The ``sarlab`` command line: the dispatcher, the options every command shares and one module per
command, each a thin layer over the Python API and the launcher.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): the engine (``sarlab.common``, ``sarlab.data``,
``sarlab.core``, ``sarlab.nn``, ``sarlab.strategies``, ``sarlab.training``, ``sarlab.kernels``, ``sarlab.version``),
``sarlab.simulator``, ``sarlab.real``, ``sarlab.real.launch``, ``sarlab.real.calibration``, ``sarlab.real.bench``,
``sarlab.real.reproduce``, ``sarlab.real.profile``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.data", "sarlab.core", "sarlab.nn", "sarlab.strategies", "sarlab.training",
    "sarlab.kernels", "sarlab.version", "sarlab.simulator", "sarlab.real", "sarlab.real.launch",
    "sarlab.real.calibration", "sarlab.real.bench", "sarlab.real.reproduce", "sarlab.real.profile"
)
