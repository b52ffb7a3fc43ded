"""The executor (:mod:`sarlab.real`): launching workers (or joining torchrun), the ``sarlab`` CLI, benchmarks,
``reproduce``, ``profile`` and the calibration steps that run real processes.

The Python API (:func:`sarlab.run`, :func:`sarlab.gradients`) is :mod:`sarlab.real.api`. Sub-packages:
:mod:`~sarlab.real.launch`, :mod:`~sarlab.real.commands`, :mod:`~sarlab.real.bench`,
:mod:`~sarlab.real.calibration`, :mod:`~sarlab.real.reproduce`, :mod:`~sarlab.real.profile`.
Nothing imports it but the front door (lazily); the API never imports the command line.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): the engine (``sarlab.common``, ``sarlab.data``,
``sarlab.core``, ``sarlab.nn``, ``sarlab.strategies``, ``sarlab.training``, ``sarlab.kernels``, ``sarlab.version``),
``sarlab.simulator``, ``sarlab.real.launch``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.data", "sarlab.core", "sarlab.nn", "sarlab.strategies", "sarlab.training",
    "sarlab.kernels", "sarlab.version", "sarlab.simulator", "sarlab.real.launch"
)
