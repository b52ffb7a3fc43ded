"""Calibration, the pure side: the types of a calibration's findings, the fitting of measured timings into a
:class:`~sarlab.simulator.hardware.profile.Profile`, measured records as the validation reads them, and the speed
probe's reading. The benchmarks that measure (real ops and processes) live in :mod:`sarlab.real.calibration`.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): ``sarlab.common``,
``sarlab.simulator.hardware``, ``sarlab.simulator.workload``, ``sarlab.simulator.network``,
``sarlab.simulator.system``, ``sarlab.simulator.strategies``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common", "sarlab.simulator.hardware", "sarlab.simulator.workload", "sarlab.simulator.network",
    "sarlab.simulator.system", "sarlab.simulator.strategies"
)
