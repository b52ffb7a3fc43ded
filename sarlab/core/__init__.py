"""The exact engine: configuration, process-group communication, sharded graphs, the three aggregation modes
(``sar``, ``sa``, ``oneshot``), the aggregators and memory measurement. Layers (:mod:`sarlab.nn`), strategies
(:mod:`sarlab.strategies`) and the training loop (:mod:`sarlab.training`) sit above it.

May import :mod:`sarlab.data`, :mod:`sarlab.common` and :mod:`sarlab.kernels`; nothing above.
It may also import :mod:`sarlab.version` (every record names the sarlab that made it).
"""

MAY_IMPORT = ("sarlab.data", "sarlab.common", "sarlab.kernels", "sarlab.version")
