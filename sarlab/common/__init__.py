"""Facts every floor uses: the metric-record schema (:mod:`~sarlab.common.records`), the machine a measurement ran
on (:mod:`~sarlab.common.machine`), cache paths (:mod:`~sarlab.common.paths`), tables and banners
(:mod:`~sarlab.common.tables`) and the figures they head (:mod:`~sarlab.common.figures`).

May import :mod:`sarlab.kernels` (its cache paths) and nothing else of sarlab.
It may also import :mod:`sarlab.version` (every record names the sarlab that made it).
"""

#: the sarlab packages this one may import (tests/test_contracts.py holds every package to its list)
MAY_IMPORT = ("sarlab.kernels", "sarlab.version")
