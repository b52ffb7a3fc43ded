"""Network: NIC channels, point-to-point and collective pricing, links whose concurrent flows share
throughput, and measured link profiles. Below the system (its clocks book messages through it).

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): ``sarlab.common``,
``sarlab.simulator.hardware``, ``sarlab.simulator.workload``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.simulator.hardware", "sarlab.simulator.workload"
)
