"""Workload: what each worker computes, sends and holds - partition statistics (from a manifest or an
estimate), the model spec, the ops of every layer and their tensor sizes (never the engine's runtime, never the
executor).

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): ``sarlab.common``, ``sarlab.data``,
``sarlab.simulator.hardware``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.data", "sarlab.simulator.hardware"
)
