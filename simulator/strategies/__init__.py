"""Strategies priced: mini-batch neighbour sampling, bounded staleness, one prediction interface over all
strategies and the cost planner.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): ``sarlab.common``, ``sarlab.data``,
``sarlab.simulator.hardware``, ``sarlab.simulator.workload``, ``sarlab.simulator.network``,
``sarlab.simulator.system``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.data", "sarlab.simulator.hardware", "sarlab.simulator.workload",
    "sarlab.simulator.network", "sarlab.simulator.system"
)
