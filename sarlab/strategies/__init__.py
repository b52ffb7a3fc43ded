"""Training strategies the trainer composes (:mod:`sarlab.training`): distributed neighbour sampling,
bounded-staleness halos, message-flow-graph pruning, label augmentation and Correct & Smooth. Each keeps the
core's metric records. The full-batch ones plug into the trainer through the hooks of :mod:`~sarlab.strategies.hooks`,
each module holding its hook class and its config dataclass; :mod:`~sarlab.strategies.registry` lists them by name
(a new strategy is a module here and a line there, with no change to the trainer).

May import :mod:`sarlab.nn`, :mod:`sarlab.core`, :mod:`sarlab.data`, :mod:`sarlab.common` and
:mod:`sarlab.kernels`; never the training floor, the executor or the simulator.
It may also import :mod:`sarlab.version` (every record names the sarlab that made it).
"""

MAY_IMPORT = ("sarlab.nn", "sarlab.core", "sarlab.data", "sarlab.common", "sarlab.kernels", "sarlab.version")
