"""Hardware profiles: per-op throughputs, network alpha-beta figures and memory constants of a machine
(presets, shipped calibrations in ``simulator/profiles/``), their plausibility checks and which profile a
run uses.

May import (``MAY_IMPORT`` below, held by tests/test_contracts.py): ``sarlab.common``.
"""

#: the sarlab packages this one may import (held by tests/test_contracts.py)
MAY_IMPORT = (
    "sarlab.common",
)
