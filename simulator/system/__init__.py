"""System: pricing tables, the per-worker clock, the schedule of one epoch as SimPy processes, the lockstep
executor, jitter and progress spread, the memory timeline and replaying a measured record, the round
model of the ring benchmark and the sweep driver (modes x models x workers).

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): ``sarlab.common``,
``sarlab.simulator.hardware``, ``sarlab.simulator.workload``, ``sarlab.simulator.network``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.simulator.hardware", "sarlab.simulator.workload", "sarlab.simulator.network"
)
