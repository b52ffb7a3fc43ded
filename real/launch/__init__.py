"""Launching: N local worker processes (or joining torchrun), the worker itself, process lifecycle and
signals, the job shipped to every rank, users' own models and the emulated cluster network (namespaces,
veth, shaping).

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): the engine (``sarlab.common``, ``sarlab.data``,
``sarlab.core``, ``sarlab.nn``, ``sarlab.strategies``, ``sarlab.training``, ``sarlab.kernels``, ``sarlab.version``),
``sarlab.simulator``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.data", "sarlab.core", "sarlab.nn", "sarlab.strategies", "sarlab.training",
    "sarlab.kernels", "sarlab.version", "sarlab.simulator"
)
