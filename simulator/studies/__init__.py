"""Studies over the model: validation against measured records, sweeps, sensitivity, the simulated figures
and their drawing, the METIS pair-size study and the paper's qualitative checks: the top floor of the
simulator, never the executor.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): ``sarlab.common``, ``sarlab.data``,
``sarlab.simulator.hardware``, ``sarlab.simulator.workload``, ``sarlab.simulator.network``,
``sarlab.simulator.system``, ``sarlab.simulator.strategies``, ``sarlab.simulator.calibration``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.data", "sarlab.simulator.hardware", "sarlab.simulator.workload",
    "sarlab.simulator.network", "sarlab.simulator.system", "sarlab.simulator.strategies",
    "sarlab.simulator.calibration"
)
